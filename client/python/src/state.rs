//! An epoch's position (`EpochState`) as plain Python values and back: what
//! `Loader.state_dict()` puts in a checkpoint.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use stoker_client::{EpochState, Fingerprint, LastBatch, PositionSet};

use crate::err;

pub(crate) fn state_to_py<'py>(py: Python<'py>, s: &EpochState) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", STATE_VERSION)?;
    d.set_item("epoch", s.epoch)?;
    d.set_item("batches", s.batches)?;
    d.set_item("done_items", s.done_items.clone())?;
    // Lists, not tuples: the state survives a JSON round trip.
    let partial = PyList::new(
        py,
        s.partial
            .iter()
            .map(|(item, positions)| {
                let ranges: Vec<[u64; 2]> = positions.ranges().iter().map(|r| [r.start, r.end]).collect();
                PyList::new(py, [item.into_pyobject(py)?.into_any(), ranges.into_pyobject(py)?])
            })
            .collect::<PyResult<Vec<_>>>()?,
    )?;
    d.set_item("partial", partial)?;
    let f = PyDict::new(py);
    let fp = &s.fingerprint;
    f.set_item("seed", fp.seed)?;
    f.set_item("rank", fp.rank)?;
    f.set_item("world_size", fp.world_size)?;
    f.set_item("batch_size", fp.batch_size)?;
    f.set_item("image_size", fp.image_size)?;
    f.set_item("last_batch", fp.last_batch.to_string())?;
    f.set_item("items", fp.items)?;
    f.set_item("shards", fp.shards)?;
    f.set_item("deterministic", fp.deterministic)?;
    d.set_item("fingerprint", f)?;
    Ok(d)
}

/// `d[key]`, converted, or a StokerError naming the key.
fn field<'py, T: FromPyObject<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    let value = d
        .get_item(key)?
        .ok_or_else(|| err(format!("saved loader state has no {key:?}")))?;
    value
        .extract()
        .map_err(|e| err(format!("saved loader state: {key:?} is invalid: {e}")))
}

/// The saved state's format. 2: items delivered in part list the
/// positions delivered, as `[start, end)` ranges; 1 (no `version` key)
/// listed their keys, which cannot tell two samples with one key apart.
const STATE_VERSION: u32 = 2;

/// `[[item, [[start, end], ...]], ...]`, as lists or tuples.
fn partial_from_py(v: &Bound<'_, PyAny>) -> PyResult<Vec<(u32, PositionSet)>> {
    let bad = |e: PyErr| err(format!("saved loader state: \"partial\" is invalid: {e}"));
    let mut out = Vec::new();
    for entry in v.try_iter().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let item: u32 = entry.get_item(0).and_then(|x| x.extract()).map_err(bad)?;
        // Lists after a JSON round trip, so not tuples.
        let ranges: Vec<Vec<u64>> = entry.get_item(1).and_then(|x| x.extract()).map_err(bad)?;
        let mut set = Vec::with_capacity(ranges.len());
        for r in ranges {
            match r[..] {
                [start, end] if start < end => set.push(start..end),
                _ => {
                    return Err(err(format!(
                        "saved loader state: \"partial\" is invalid: item {item} has range {r:?}, not [start, end] with start < end"
                    )));
                }
            }
        }
        out.push((item, PositionSet::from_ranges(set)));
    }
    Ok(out)
}

pub(crate) fn state_from_py(d: &Bound<'_, PyDict>) -> PyResult<EpochState> {
    let version: u32 = match d.get_item("version")? {
        Some(v) => v
            .extract()
            .map_err(|e| err(format!("saved loader state: \"version\" is invalid: {e}")))?,
        None => 1,
    };
    let partial_saved = field::<Bound<'_, PyAny>>(d, "partial")?;
    if version == 1 && partial_saved.len().unwrap_or(0) > 0 {
        return Err(err(
            "saved loader state is from a stoker that named the samples of partly delivered items by key; \
             samples are now identified by their position in the shard (keys repeat), so it cannot resume \
             mid-item: start the epoch afresh (load_state_dict of a state saved between epochs still works)"
                .to_owned(),
        ));
    }
    if version > STATE_VERSION {
        return Err(err(format!(
            "saved loader state has version {version}, newer than this stoker's {STATE_VERSION}"
        )));
    }
    let partial = if version == 1 {
        Vec::new()
    } else {
        partial_from_py(&partial_saved)?
    };
    let f: Bound<'_, PyDict> = field(d, "fingerprint")?;
    Ok(EpochState {
        epoch: field(d, "epoch")?,
        batches: field(d, "batches")?,
        done_items: field(d, "done_items")?,
        partial,
        fingerprint: Fingerprint {
            seed: field(&f, "seed")?,
            rank: field(&f, "rank")?,
            world_size: field(&f, "world_size")?,
            batch_size: field(&f, "batch_size")?,
            image_size: field(&f, "image_size")?,
            last_batch: field::<String>(&f, "last_batch")?
                .parse::<LastBatch>()
                .map_err(|e| err(format!("saved loader state: \"last_batch\" is invalid: {e}")))?,
            items: field(&f, "items")?,
            shards: field(&f, "shards")?,
            deterministic: field(&f, "deterministic")?,
        },
    })
}
