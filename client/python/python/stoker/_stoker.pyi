# The extension's types, written from its PyO3 signatures and what they
# take and return (client/python/src: lib.rs, dlpack.rs, inprocess.rs,
# options.rs, state.rs):
# PyO3 gives Python the names, order and defaults but no types. The tests
# check this stub against the built module with mypy.stubtest
# (client/python/stubtest_allowlist.txt lists what it cannot judge).

from typing import Any, Sequence, TypedDict, final

__all__ = [
    "Client",
    "DeviceTensor",
    "InProcessWorker",
    "StokerError",
    "arg_kinds",
    "check_transform",
    "draw_outline",
    "field_kinds",
    "follow_targets",
    "main",
    "op_schema",
    "parse_field",
]

class _LocalWorker(TypedDict):
    address: str
    role: str
    pid: int | None
    in_process: bool
    restarts: int

class _Fingerprint(TypedDict):
    seed: int
    rank: int
    world_size: int
    batch_size: int
    image_size: int
    last_batch: str
    items: int
    shards: int
    deterministic: bool

class _EpochState(TypedDict):
    version: int
    epoch: int
    batches: int
    done_items: list[int]
    # [[item, [[start, end], ...]], ...]
    partial: list[list[int | list[list[int]]]]
    fingerprint: _Fingerprint

class _Stage(TypedDict):
    stage: str
    worker: str | None
    samples: int
    bytes: int
    seconds: float
    images_per_sec: float

class _Diagnosis(TypedDict):
    stages: list[_Stage]
    bottleneck: str
    summary: str
    target_rate: float
    workers: int
    workers_for_target: int

# A record field's value: int, float, lists of them, text (or JSON text),
# bytes, an array as (dtype, shape, bytes), or None where an optional field
# is absent.
_FieldValue = int | float | list[int] | list[float] | str | bytes | tuple[str, list[int], bytes] | None

# Pixels (uint8 NHWC bytes, or a DeviceTensor when the client uploads),
# the images' block (height, width) and each image's (height, width) in it,
# labels, keys, index in the epoch, padded samples, each field's values,
# and each view's (name, side, pixels).
_Batch = tuple[
    bytes | DeviceTensor,
    tuple[int, int, list[tuple[int, int]]],
    list[int],
    list[str],
    int,
    int,
    list[list[_FieldValue]],
    list[tuple[str, int, bytes]],
]

# Samples, skipped, reassigned items, (key, reason) of the first skips,
# batches, seconds waited, seconds elapsed, recommended workers, and
# (address, samples, samples left on the device) per worker.
_Report = tuple[int, int, int, list[tuple[str, str]], int, float, float, int | None, list[tuple[str, int, int]]]

class _OpArg(TypedDict):
    name: str
    kind: str
    python_type: str
    python_value: str
    required: bool
    # Any: the default is any JSON value (None when required).
    default: Any
    doc: str

class _OpEntry(TypedDict):
    name: str
    doc: str
    origin: str
    role: str
    args: list[_OpArg]

class _ArgKind(TypedDict):
    name: str
    accepts: str
    python_type: str
    python_value: str

# The Loader's settings as Client takes them (options.rs's LoaderOptions):
# LoaderConfig's fields in plain values, every key required.
# tests/python/options_check.py checks these keys against the Loader's dict
# and the extension's struct.
class _RecordFieldsOptions(TypedDict):
    image: str | None
    label: str | None
    label_offset: int

class _FieldOptions(TypedDict):
    name: str
    source: str
    kind: str
    optional: bool

class _ViewOptions(TypedDict):
    name: str
    # the pipeline's canonical JSON
    transform: str

class _DeviceOptions(TypedDict):
    ordinal: int
    dtype: str
    layout: str
    mean: list[float] | None
    std: list[float] | None

class _LocalOptions(TypedDict):
    command: list[str]
    threads: int | None
    gpu: int | None

class _LoaderOptions(TypedDict):
    workers: list[str]
    dataset: str
    format: str
    record: _RecordFieldsOptions
    fields: list[_FieldOptions]
    views: list[_ViewOptions]
    batch_size: int
    # "train", "eval" or a pipeline's JSON, at image_size
    transform: str
    image_size: int | None
    seed: int
    rank: int
    world_size: int
    prefetch: int
    last_batch: str
    deterministic: bool
    aspect_ratio_grouping: bool
    # seconds
    progress_timeout: float
    connect_timeout: float
    max_errors: str | None
    token: str | None
    device: _DeviceOptions | None
    # "PORT" or "HOST:PORT"
    metrics_listen: str | None
    resolve_interval: float
    # "IP:PORT"
    dns_server: str | None
    shared_memory: int
    local: _LocalOptions | None

# PyO3's classes: made by __new__ (#[new]), not subclassable.
@final
class Client:
    def __new__(cls, options: _LoaderOptions) -> Client: ...
    def batches_per_epoch(self) -> int | None: ...
    def doctor(self, samples: int, seconds: float, target_rate: float | None = ...) -> _Diagnosis: ...
    def epoch_ahead(self) -> int | None: ...
    def local_workers(self) -> list[_LocalWorker]: ...
    def next_batch(self) -> _Batch | None: ...
    def report(self) -> _Report | None: ...
    # Any: a state read back from a checkpoint is any dict until the
    # extension checks it, naming the key it refuses.
    def start_epoch(self, epoch: int, state: _EpochState | dict[str, Any] | None = ...) -> int: ...
    def state(self) -> _EpochState | None: ...
    def stop_epoch(self, generation: int) -> None: ...
    def upload_error(self) -> str | None: ...
    def uploads(self) -> bool: ...

@final
class DeviceTensor:
    def __dlpack__(
        self,
        stream: int | None = ...,
        max_version: tuple[int, int] | None = ...,
        dl_device: tuple[int, int] | None = ...,
        copy: bool | None = ...,
    ) -> object: ...  # a PyCapsule ("dltensor"), opaque to Python
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def shape(self) -> list[int]: ...

@final
class InProcessWorker:
    def __new__(cls, args: Sequence[str]) -> InProcessWorker: ...
    @property
    def address(self) -> str: ...
    def stop(self) -> None: ...

class StokerError(Exception): ...

def arg_kinds() -> list[_ArgKind]: ...
def check_transform(transform: str, image_size: int | None = ...) -> tuple[int | None, str]: ...
def draw_outline(segmentation: str, width: int, height: int) -> bytes: ...
def field_kinds() -> list[tuple[str, list[str]]]: ...
def follow_targets(
    transform: str,
    image_size: int | None,
    width: int,
    height: int,
    seed: int,
    boxes: Sequence[Sequence[float]],
    format: str = ...,
    keypoints: Sequence[Sequence[Sequence[float]]] | None = ...,
    flip_idx: Sequence[int] | None = ...,
) -> dict[str, object]: ...
def main(argv: Sequence[str], self_command: Sequence[str] | None = ...) -> int: ...
def op_schema() -> list[_OpEntry]: ...
def parse_field(name: str, text: str) -> tuple[str, str, bool]: ...
