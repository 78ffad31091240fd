"""Table printing (rich when installed, plain text otherwise), JSON output and PNG plots (matplotlib, Agg;
skipped when matplotlib is missing) for the benchmark suites."""

import json
import math
import os


def print_table(title, columns, rows):
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for c in columns:
            table.add_column(c, justify="right")
        for r in rows:
            table.add_row(*[str(x) for x in r])
        Console(width=200).print(table)
    except ImportError:
        widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
        print(title)
        print("  ".join(str(c).rjust(w) for c, w in zip(columns, widths)))
        for r in rows:
            print("  ".join(str(x).rjust(w) for x, w in zip(r, widths)))


def peer_agrees(peer, err, tol):
    """Whether a peer's output agrees with ours (err <= tol; NaN disagrees; None: not compared), printing why its
    time is left out otherwise: a peer's time is reported only where its output matches ours."""
    if err is not None and not err <= tol:
        print("    %s: output differs from ours (relative error %.2e > %.0e): its time is not reported" % (
            peer, err, tol), flush=True)
        return False
    return True


def ours_finite(tensors, what):
    """Whether our outputs are finite; where not, the comparisons of `what` say nothing about the peer (the row is
    ours to fix): printed loudly."""
    finite = all(bool(t.isfinite().all()) for t in tensors)
    if not finite:
        print("    OUR output has non-finite values: %s are void" % what, flush=True)
    return finite


def provenance():
    """Which binary and settings produced a suite's numbers: the loaded extension's path and sha256, the STAGED.txt
    of a staged copy (tools/stage_experiments.sh writes its commit there) and every HPC_* environment variable."""
    import hashlib

    from hpc_xla._ext import ext

    so = ext().__file__
    with open(so, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    staged = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(so))), "STAGED.txt")
    info = dict(binary=so, binary_sha256=digest,
                env={k: v for k, v in sorted(os.environ.items()) if k.startswith("HPC_")})
    if os.path.isfile(staged):
        with open(staged) as f:
            info["staged"] = f.read().strip()
    return info


def write_json(path, payload):
    """The suite's records, with the provenance of the binary that produced them."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(dict(payload, provenance=provenance()), f, indent=2)


def plot_path(json_path):
    """The PNG that goes next to a suite's JSON: results/moe.json -> results/moe.png (None without --out)."""
    if not json_path:
        return None
    root, ext = os.path.splitext(json_path)
    return (root if ext.lower() == ".json" else json_path) + ".png"


def plot(path, panels, title=None, ncols=3):
    """Line plots, one panel each, written to `path` (PNG). Returns the path, or None when there is no path,
    nothing to draw, or no matplotlib. A panel is a dict: title, xlabel, ylabel, logx, logy (bools), hline (a y
    to mark, e.g. 1.0 for a ratio), lines (False: markers only), series: [dict(label, x, y)]; points whose x or
    y is None are dropped and each series is drawn in x order."""
    panels = [p for p in panels if any(y is not None for s in p["series"] for y in s["y"])]
    if not path or not panels:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: matplotlib is not installed)")
        return None
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols, 3.9 * nrows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for s in panel["series"]:
            pts = sorted((x, y) for x, y in zip(s["x"], s["y"]) if x is not None and y is not None)
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=s["label"],
                        linestyle="-" if panel.get("lines", True) else "none")
        if panel.get("hline") is not None:
            ax.axhline(panel["hline"], color="gray", linewidth=0.8, linestyle=":")
        if panel.get("logx"):
            ax.set_xscale("log", base=2)
        if panel.get("logy"):
            ax.set_yscale("log")
        ax.set_title(panel.get("title", ""), fontsize=9)
        ax.set_xlabel(panel.get("xlabel", ""), fontsize=8)
        ax.set_ylabel(panel.get("ylabel", ""), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("plot: %s" % path)
    return path
