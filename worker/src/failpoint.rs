//! Fault injection for tests, compiled only with the `failpoints` feature
//! (`scripts/test.sh` builds the integration tests' `stoker` with
//! `--features stoker/failpoints`; release builds carry none of it).
//!
//! A worker sets its points at start from the `FAILPOINTS` environment
//! variable, in the `fail` crate's syntax (`NAME=ACTIONS;...`). The points
//! here take a sample key as their argument:
//! `FAILPOINTS='stoker-decode-panic=return(KEY)'` makes decoding the sample
//! `KEY` panic, as a decoder bug on a crafted image would.

/// CPU decode of the chosen key panics (`pipeline::process_sample`).
pub const DECODE_PANIC: &str = "stoker-decode-panic";
/// A GPU lane's header read of the chosen key panics (`gpu::runner`).
pub const GPU_PLAN_PANIC: &str = "stoker-gpu-plan-panic";

/// Each sample's CPU decode, or GPU lane plan, waits as the point's
/// `sleep(MS)` action says (`FAILPOINTS='stoker-sample-pause=sleep(20)'`):
/// a slow worker, for tests that must catch one mid-item (a SIGKILL)
/// however fast the machine.
pub const SAMPLE_PAUSE: &str = "stoker-sample-pause";

/// Waits if [`SAMPLE_PAUSE`] is set (to `sleep(MS)`: the only action it
/// takes).
pub(crate) fn pause() {
    fail::fail_point!(SAMPLE_PAUSE);
}

/// A client's shared ring is refused as if it could not be mapped
/// (`rings::Rings::attach`), for the fallback to inline pixels.
pub const RING_REFUSED: &str = "stoker-ring-refused";

/// Panics if the point `point` is set to `return(KEY)` with this `key`.
pub(crate) fn panic_if_chosen(point: &str, key: &str) {
    fail::fail_point!(point, |chosen: Option<String>| {
        if chosen.as_deref() == Some(key) {
            panic!("failpoint {point}: injected panic on {key}");
        }
    });
}

/// Sets the points `FAILPOINTS` names, if any, and returns them as
/// `NAME=ACTIONS` for the log.
pub fn configure_from_env() -> Result<Vec<String>, String> {
    match std::env::var("FAILPOINTS") {
        Ok(spec) => configure(&spec),
        Err(_) => Ok(Vec::new()),
    }
}

/// Sets the points of `spec` (`FAILPOINTS`' syntax) in this process, for
/// a worker started in it (`stoker_cli::embedded`); returns them as
/// `NAME=ACTIONS`. [`clear`] removes one.
pub fn configure(spec: &str) -> Result<Vec<String>, String> {
    let mut set = Vec::new();
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, actions) = entry
            .split_once('=')
            .ok_or_else(|| format!("invalid failpoint {entry:?} in FAILPOINTS: expected NAME=ACTIONS"))?;
        fail::cfg(name.trim(), actions.trim())
            .map_err(|e| format!("invalid failpoint {entry:?} in FAILPOINTS: {e}"))?;
        set.push(entry.to_owned());
    }
    Ok(set)
}

/// Removes the point `name` from this process.
pub fn clear(name: &str) {
    fail::remove(name);
}
