#!/usr/bin/env python3
"""Prints values of a JSON file for FileCheck, one per line, read with a
real JSON parser (a file that is not valid JSON fails the test).

  json-query.py FILE PATH...

PATH is dot-separated keys and list indices ("loss_curve.0.step"); a
trailing "#" prints the length of a list or object ("loss_curve#"), a
trailing "*" the sorted keys of an object. Each line reads
"PATH = VALUE" with VALUE as compact JSON. A missing path is an error
(exit 1), so a test cannot pass on a field that is not there.
"""
import json
import sys


def lookup(document, path):
    value = document
    for part in path.split(".") if path else []:
        if isinstance(value, list):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value[part]
        else:
            raise KeyError(part)
    return value


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        # parse_constant rejects NaN/Infinity, which Python accepts but JSON
        # does not.
        document = json.load(f, parse_constant=lambda c: sys.exit(
            f"json-query: {sys.argv[1]}: {c} is not JSON"))
    for path in sys.argv[2:]:
        key = path.rstrip("#*")
        try:
            value = lookup(document, key)
        except (KeyError, IndexError, ValueError):
            sys.exit(f"json-query: {sys.argv[1]}: no {key!r}")
        if path.endswith("#"):
            value = len(value)
        elif path.endswith("*"):
            value = sorted(value)
        print(f"{path} = {json.dumps(value, separators=(', ', ': '))}")


if __name__ == "__main__":
    main()
