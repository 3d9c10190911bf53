"""``biasim vendor-demo``: the loopback "vendor API" the ``aedt_audit`` walk-through audits."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Annotated

import typer

from biasim.simulator.cli.common import app, fail_input, out_console
from biasim.simulator.common.errors import InputError, Problem

_PORT_OPTION = typer.Option(min=0, max=65535, help="Port on 127.0.0.1 (0: a free one).")
_PENALTY_OPTION = typer.Option(
    min=0.0, max=1.0, help="The declared bias: score women lose (0: no bias)."
)
#: A year: "until Ctrl-C" without a loop.
_FOREVER_S = 365 * 24 * 3600.0
_KEY_ENV_OPTION = typer.Option(help="Environment variable holding the key the API demands.")


@app.command("vendor-demo")
def vendor_demo(
    port: Annotated[int, _PORT_OPTION] = 8765,
    penalty: Annotated[float, _PENALTY_OPTION] = 0.2,
    key_env: Annotated[str, _KEY_ENV_OPTION] = "AEDT_DEMO_KEY",
    serve_s: Annotated[
        float | None, typer.Option(min=0.0, help="Stop after this many seconds (default: Ctrl-C).")
    ] = None,
) -> None:
    """Serve a résumé scorer with a declared bias against women on 127.0.0.1, for the
    aedt_audit study; prints the AEDT_VENDOR_URL to export."""
    from biasim.simulator.tools.vendor_demo import VendorDemo

    key = os.environ.get(key_env)
    if not key:
        fail_input(InputError([Problem("--key-env", None, "", f"{key_env} is not set")]))
    try:
        demo = VendorDemo(key, penalty=penalty, port=port)
    except OSError as exc:
        fail_input(InputError([Problem("--port", None, "", f"cannot listen on {port}: {exc}")]))
    with demo:
        out_console.print(f"AEDT_VENDOR_URL={demo.url}", highlight=False, soft_wrap=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a demo ends
            time.sleep(serve_s if serve_s is not None else _FOREVER_S)
        out_console.print(f"answered {demo.count} request(s)", highlight=False)
