"""Table printing (rich when installed, plain text otherwise) and JSON output for the benchmark suites."""

import json
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


def write_json(path, payload):
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
