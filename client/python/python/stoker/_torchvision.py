"""Which torchvision API made an object, by its class's module alone:
torchvision is never imported. Shared by the image transforms'
conversion (transforms.py) and the batch transforms' (_batch.py)."""


def _tv_module(module):
    """Which torchvision API a module is part of: "v1", "v2" or None."""
    module = module or ""
    if module.startswith("torchvision.transforms.v2."):
        return "v2"
    if module in ("torchvision.transforms.transforms", "torchvision.transforms.autoaugment"):
        return "v1"
    return None


def _tv_version(obj):
    """Which torchvision API made `obj` ("v1", "v2" or None)."""
    return _tv_module(type(obj).__module__)


def _where(path, name):
    """Where a transform sits in what the user passed, for messages."""
    return f"{path} ({name})" if path else name
