"""The old import path of :mod:`cauchylin_hf.app.demo`."""

from .app.demo import FULL, QUICK, DemoSettings, run_demo

__all__ = ["FULL", "QUICK", "DemoSettings", "run_demo"]
