"""The ImageFolder tree the test writers read: class folders sorted, their
files sorted, each image keyed `<class>/<stem>` (the key `stoker pack`
gives it) with its class's 0-based position as label."""

import os


def read_image_folder(src):
    """(classes, [(key, bytes, label), ...]) of the tree at `src`."""
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    samples = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(src, cls))):
            stem = os.path.splitext(name)[0]
            with open(os.path.join(src, cls, name), "rb") as f:
                samples.append((f"{cls}/{stem}", f.read(), label))
    return classes, samples
