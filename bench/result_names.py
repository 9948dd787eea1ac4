"""How the benchmark scripts name their result files (no third-party imports)."""

import re


def gpu_slug(name):
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3': the
    card's whole name, so that two cards whose names end alike ('... HBM3')
    do not write over each other's results."""
    name = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


if __name__ == "__main__":
    # A check that can fail: `python3 bench/result_names.py`.
    for name, slug in [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"), ("", "gpu")]:
        assert gpu_slug(name) == slug, (name, gpu_slug(name), slug)
    print("ok")
