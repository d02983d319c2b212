"""`hindsight bench`: the small-scale versions of the papers' tables, run as resumable cells of
existing `hindsight` commands and reported beside the published numbers.

    published.py  the papers' numbers, typed in
    cells.py      cells, their steps (commands), readouts, and our side of each table
    plan.py       scales, the target (model, environment), and every paper's cells and tables
    runner.py     running the cells: resume, skip, failures, two at a time, progress
    page.py       DIR/report/index.html
"""
