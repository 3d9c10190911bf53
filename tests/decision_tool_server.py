"""The loopback "vendor API" of the decision-tool tests: the one biasim serves for the
``aedt_audit`` walk-through (:mod:`biasim.simulator.tools.vendor_demo`), under the names the
tests use. Its declared bias: women lose :data:`PENALTY` of score."""

from __future__ import annotations

from biasim.simulator.tools.vendor_demo import PENALTY, THRESHOLD, label, score
from biasim.simulator.tools.vendor_demo import VendorDemo as ToolServer

__all__ = ["PENALTY", "THRESHOLD", "ToolServer", "label", "score"]
