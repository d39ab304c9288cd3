"""Plain-text tables for the reports printed to a terminal or a log (tabulate's "simple" style)."""
from tabulate import tabulate


def text_table(header, rows, left=()) -> str:
    """header over a dashed rule, then the rows, columns two spaces apart and right-aligned but the ones numbered
    in `left`. Cells are printed as given: the caller formats its numbers, so "50.0" stays "50.0" (tabulate would
    otherwise parse it and print 50)."""
    return tabulate(rows, header, tablefmt="simple", disable_numparse=True,
                    colalign=["left" if i in left else "right" for i in range(len(header))])
