"""Argument types the benchmark scripts share (no third-party imports, so the
drivers that must not import torch can use it too)."""

import argparse


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
