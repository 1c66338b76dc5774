"""Parses Prometheus text exposition from stdin with prometheus_client's own
parser (independent of the Rust encoder) and prints it as JSON: one object
mapping `name{label="value",...}` (labels sorted) to the sample's value.
Exits non-zero, naming the problem, on text the parser refuses.
"""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    out = {}
    for family in text_string_to_metric_families(sys.stdin.read()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    print(json.dumps(out))


if __name__ == "__main__":
    main()
