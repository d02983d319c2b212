from hypothesis import given, strategies as st

from hindsight.agent.parser import MAX_ACTION_CHARS, parse_response


def test_tags_with_analysis():
    parsed = parse_response("<analysis>goal is right</analysis>\n<action> right </action>")
    assert parsed.action == "right"
    assert parsed.analysis == "goal is right"
    assert parsed.ok and parsed.error is None


def test_tag_case_and_spacing_and_last_block_wins():
    parsed = parse_response("e.g. <ACTION>up</ACTION> ... so < action >stack A B</ action >")
    assert parsed.action == "stack A B"


def test_think_synonym_and_cut_off_action():
    parsed = parse_response("<think>left is a hole</think><action>down")
    assert parsed.action == "down"
    assert parsed.analysis == "left is a hole"


def test_json_forms():
    assert parse_response('{"think": "go", "action": "left"}').action == "left"
    fenced = parse_response('Sure!\n```json\n{"analysis": "x", "action": "fill 1 2 3"}\n```')
    assert fenced.action == "fill 1 2 3" and fenced.analysis == "x"


def test_unparseable_inputs_are_reported_not_raised():
    for text in ["", "   ", "I will move right", "<action></action>", '{"action": null}', '{"think": "no action"}', "{not json"]:
        parsed = parse_response(text)
        assert parsed.action is None
        assert parsed.error


def test_whitespace_is_normalised_and_length_bounded():
    assert parse_response("<action>stack\n  A   B</action>").action == "stack A B"
    assert len(parse_response("<action>" + "x" * 5000 + "</action>").action) == MAX_ACTION_CHARS


@given(st.text(max_size=400))
def test_parser_never_raises(text):
    parsed = parse_response(text)
    assert (parsed.action is None) == (parsed.error is not None)
    if parsed.action is not None:
        assert parsed.action == parsed.action.strip() and parsed.action


@given(
    st.text(alphabet=st.characters(blacklist_characters="<>`'\"", blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=50).filter(lambda s: s.strip()),
    st.text(alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=80),
)
def test_well_formed_responses_round_trip(action, analysis):
    parsed = parse_response(f"<analysis>{analysis}</analysis><action>{action}</action>")
    assert parsed.action == " ".join(action.split())[:MAX_ACTION_CHARS]
