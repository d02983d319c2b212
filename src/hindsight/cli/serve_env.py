"""`hindsight serve-env`: serve an environment over HTTP for other processes and machines.

hindsight serve-env frozenlake --port 8765 --set size=5
hindsight eval --env http://HOST:8765/frozenlake --model smollm2 --episodes 20
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve-env", help="serve an environment over HTTP (use it anywhere as --env http://HOST:PORT/ID)",
        description="Serve one registered environment over HTTP. Every command then reaches it with "
                    "--env http://HOST:PORT/ID; keywords a client passes are merged over the --set defaults.",
    )
    parser.add_argument("env_id", metavar="ID")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; "
                                                            "0.0.0.0 for other machines)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a default environment keyword, e.g. --set size=6 (repeatable)")
    parser.add_argument("--pool", type=int, default=64,
                        help="most environment instances alive at once, one per open session (default 64)")
    parser.add_argument("--session-timeout", type=float, default=600.0, metavar="S",
                        help="close a session idle for this many seconds (default 600)")
    parser.add_argument("--call-timeout", type=float, default=120.0, metavar="S",
                        help="a reset, step or query that runs longer fails and its instance is discarded "
                             "(default 120)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hindsight.cli.envs import parse_settings
    from hindsight.cli.main import CLIError
    from hindsight.envs import EnvError
    from hindsight.envs.server import EnvPool, listen, serve

    if not 0 < args.port < 65536:
        raise CLIError(f"--port must be between 1 and 65535, got {args.port}")
    try:
        pool = EnvPool(args.env_id, parse_settings(args.settings), size=args.pool,
                       session_timeout=args.session_timeout, call_timeout=args.call_timeout)
    except EnvError as exc:
        raise CLIError(str(exc)) from None
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:  # the port is taken, or the address is not this machine's
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    shown = "localhost" if args.host in ("127.0.0.1", "0.0.0.0") else args.host
    print(f"serving {pool.env_id} at http://{shown}:{args.port}/{pool.env_id} (pool of {pool.size}); "
          "Ctrl-C stops it", flush=True)
    serve(pool, sock)
    return 0
