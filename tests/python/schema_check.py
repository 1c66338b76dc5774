"""The workers' op schema (_stoker.op_schema()) against torchvision itself.

For every op whose origin is ``torchvision.transforms.v2.<Name>``: the
class exists, its parameters are the schema's arguments in the same order,
a parameter is required exactly when the schema says so, and each default,
read through stoker.transforms' converter for the argument's kind, equals
the schema's default read the same way. Prints one line per op and ends
with ``op schema: N ops match torchvision <version>``.
"""

import inspect
import sys

import torchvision
from torchvision.transforms import v2

from stoker import _stoker
from stoker import transforms as T


def main() -> int:
    problems = []
    checked = 0
    for entry in _stoker.op_schema():
        name, origin = entry["name"], entry["origin"]
        if not origin.startswith("torchvision.transforms.v2."):
            print(f"{name:<24} {origin} (not torchvision: not compared)")
            continue
        cls = getattr(v2, origin.rsplit(".", 1)[1], None)
        if cls is None:
            problems.append(f"{name}: torchvision {torchvision.__version__} has no {origin}")
            continue
        params = [p for p in inspect.signature(cls).parameters.values() if p.name != "self"]
        names = [p.name for p in params]
        want = [a["name"] for a in entry["args"]]
        if names != want:
            problems.append(f"{name}: torchvision's parameters {names}, the schema's {want}")
            continue
        for p, a in zip(params, entry["args"]):
            tv_required = p.default is inspect.Parameter.empty
            if tv_required != a["required"]:
                problems.append(f"{name}.{a['name']}: torchvision required={tv_required}, the schema {a['required']}")
                continue
            if tv_required:
                continue
            convert = T._KINDS[a["kind"]]
            ours = convert(a["name"], a["default"])
            theirs = convert(a["name"], p.default)
            if ours != theirs:
                problems.append(f"{name}.{a['name']}: torchvision's default {p.default!r} ({theirs!r}), the schema's {ours!r}")
        checked += 1
        print(f"{name:<24} {len(params)} parameters match")
    if problems:
        print("op schema differs from torchvision:\n  " + "\n  ".join(problems))
        return 1
    print(f"op schema: {checked} ops match torchvision {torchvision.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
