"""The one object a ``stoker.Loader`` hands the extension: its dict of
settings (``_LoaderOptions``, client/python/src/options.rs) has the same
keys, nested dicts included, in the three places that name them:

- the stub, ``stoker/_stoker.pyi``'s ``TypedDict``s (read with ``ast``:
  they exist only there, so stubtest cannot compare them);
- the dict the Loader builds (caught by a stand-in ``Client``, with a
  device upload, local workers, a field and a view, so that every nested
  dict is there);
- the extension: without any one key, ``Client`` refuses the dict naming
  it (a ``KeyError``); with all of them it reads the dict whole and only then checks the
  values (a bad ``last_batch`` is a ``ConfigError`` naming it).

No worker is contacted.

usage: options_check.py
"""

import ast
import copy
import os

import stoker
from stoker import _stoker, loader

# Where a nested dict sits in the Loader's dict: a key, or a list whose
# entries are dicts ("[]"), and the stub's TypedDict for it.
NESTED = {
    ("record",): "_RecordFieldsOptions",
    ("fields", "[]"): "_FieldOptions",
    ("views", "[]"): "_ViewOptions",
    ("device",): "_DeviceOptions",
    ("local",): "_LocalOptions",
}


def stub_keys():
    """{TypedDict name: its keys} of _stoker.pyi."""
    path = os.path.join(os.path.dirname(_stoker.__file__), "_stoker.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "TypedDict" for b in node.bases):
            out[node.name] = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)]
    return out


class _Caught(Exception):
    pass


def loaders_dict():
    """The dict a Loader hands Client, with every nested dict present."""
    caught = {}

    class StandIn:
        def __init__(self, options):
            caught.update(options)
            raise _Caught

    real_client, real_upload = loader.Client, loader.Loader._upload_target
    loader.Client = StandIn
    # As on a CUDA device (which this venv, without torch, has not).
    loader.Loader._upload_target = lambda self: (0, "float32", "nchw")
    try:
        stoker.Loader(
            ["local", "127.0.0.1:1"],
            "/nonexistent",
            batch_size=4,
            image_size=32,
            mean=[0.5, 0.5, 0.5],
            std=[0.25, 0.25, 0.25],
            fields={"caption": "txt"},
            views={"small": "eval"},
            local_gpu=False,
        )
    except _Caught:
        pass
    finally:
        loader.Client, loader.Loader._upload_target = real_client, real_upload
    assert caught, "the stand-in Client was never called"
    return caught


def at(options, path):
    """The nested dicts at `path` of `options`."""
    found = [options]
    for step in path:
        found = [x for d in found for x in d] if step == "[]" else [d[step] for d in found]
    return found


def messages(e):
    """An exception's message with those of its causes."""
    out = []
    while e is not None:
        out.append(str(e))
        e = e.__cause__
    return " <- ".join(out)


def main() -> None:
    stubs = stub_keys()
    options = loaders_dict()
    # The stub and the Loader's dict.
    assert sorted(options) == sorted(stubs["_LoaderOptions"]), (
        f"the Loader's dict {sorted(options)} and _stoker.pyi's _LoaderOptions "
        f"{sorted(stubs['_LoaderOptions'])} name different keys"
    )
    places = [((), "_LoaderOptions")] + list(NESTED.items())
    for path, name in places[1:]:
        dicts = at(options, path)
        assert dicts and all(isinstance(d, dict) for d in dicts), f"{path}: no dict in the Loader's {dicts!r}"
        for d in dicts:
            assert sorted(d) == sorted(stubs[name]), f"{path}: the Loader's {sorted(d)}, {name}'s {sorted(stubs[name])}"
    # The extension reads every key, and needs each.
    keys = 0
    for path, name in places:
        for key in stubs[name]:
            less = copy.deepcopy(options)
            for d in at(less, path):
                del d[key]
            try:
                _stoker.Client(less)
            except (KeyError, TypeError) as e:
                # KeyError('seed'), or a nested dict's TypeError("failed to
                # extract field LoaderOptions.fields") caused by its KeyError.
                told = messages(e)
                assert f"'{key}'" in told, f"without {path}/{key} Client refused the dict, but not naming it: {told}"
            else:
                raise AssertionError(f"Client took the dict without {path}/{key}")
            keys += 1
    bad = dict(options, last_batch="bogus")
    try:
        _stoker.Client(bad)
    except stoker.ConfigError as e:
        assert "bogus" in str(e), str(e)
    else:
        raise AssertionError("Client took last_batch='bogus'")
    print(f"loader options: {keys} keys in {len(places)} dicts agree in the stub, the Loader and the extension")


if __name__ == "__main__":
    main()
