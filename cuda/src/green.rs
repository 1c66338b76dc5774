//! Confining a worker's GPU work to part of the device's SMs, so that a
//! training step on the same GPU keeps the rest: a green context
//! (`cuGreenCtxCreate`, CUDA 12.4+) over a share of the SMs, and streams
//! created in it (`cuGreenCtxStreamCreate`). Work launched on such a
//! stream (our kernels, nvJPEG's, the copies) runs on that share only,
//! while the kernels stay loaded in the device's primary context, which
//! stays current: a green context's stream takes launches of functions
//! loaded there (measured on an H200: a bf16 matmul on 8 of 132 SMs took
//! 14x as long as on all, 16 SMs 7x, 64 SMs 1.8x, with equal results).
//!
//! [`SmShare`] is what a user asks for (`all`, `auto`, a count) and
//! [`SmShare::resolve`] the policy turning it into a partition size within
//! the device's rules ([`SmResource`]: Hopper partitions come in groups of
//! 8 SMs). [`SmPartition::open`] makes the partition; a partition, once
//! made, lives as long as the process (one per device and size, shared by
//! every worker started in it), and so do the streams it lends
//! ([`SmPartition::stream`]), which are reused once nothing holds them.
//!
//! Where the driver has no green contexts (older than CUDA 12.4, or a
//! device without SM partitioning), [`SmPartition::open`] says so
//! ([`GreenUnavailable`]) and [`confinement`] decides: `auto` runs on the
//! whole device, an explicit count is an error naming the cause.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::driver::{CudaContext, CudaStream, sys};

use crate::runtime::{CudaUnavailable, catch_cuda_panic};

/// How much of the device a worker's lanes may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SmShare {
    /// Every SM: the lanes share the device with whatever else runs there.
    #[default]
    All,
    /// The share [`SmShare::resolve`]'s rule picks for lanes that share the
    /// GPU with a training step.
    Auto,
    /// At least this many SMs (rounded up to what the device can split).
    Count(u32),
}

impl FromStr for SmShare {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "all" => Ok(Self::All),
            "auto" => Ok(Self::Auto),
            n => match n.parse::<u32>() {
                Ok(0) | Err(_) => Err(format!(
                    "expected `all`, `auto` or a count of SMs of at least 1, got {s:?}"
                )),
                Ok(n) => Ok(Self::Count(n)),
            },
        }
    }
}

impl fmt::Display for SmShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Auto => f.write_str("auto"),
            Self::Count(n) => write!(f, "{n}"),
        }
    }
}

/// What a device offers for SM partitions, as `cuDeviceGetDevResource`
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmResource {
    /// SMs of the device.
    pub total: u32,
    /// The smallest partition it makes.
    pub min_partition: u32,
    /// Partition sizes are multiples of this.
    pub alignment: u32,
}

/// The share of SMs [`SmShare::Auto`] gives the lanes: one eighth of the
/// device, at least 16 SMs. See docs/benchmarks.md, "Confining the lanes".
pub const AUTO_FRACTION: u32 = 8;
/// The least [`SmShare::Auto`] gives.
pub const AUTO_MIN_SMS: u32 = 16;

impl SmShare {
    /// The partition size this share asks of a device with `res`, or
    /// `None` for the whole device (asked for, or a count that rounds up
    /// to every SM).
    pub fn resolve(self, res: &SmResource) -> Option<u32> {
        let asked = match self {
            Self::All => return None,
            Self::Auto => (res.total / AUTO_FRACTION).max(AUTO_MIN_SMS),
            Self::Count(n) => n,
        };
        let step = res.alignment.max(1);
        let size = asked.max(res.min_partition).div_ceil(step).saturating_mul(step);
        (size < res.total).then_some(size)
    }
}

/// Why the lanes cannot be confined on this host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GreenUnavailable {
    #[error(transparent)]
    Cuda(#[from] CudaUnavailable),
    #[error("no green contexts on cuda device {ordinal}: {reason}")]
    Unsupported { ordinal: usize, reason: String },
}

/// What [`confinement`] decided: the partition to run on, or the whole
/// device and why.
#[derive(Clone, Debug)]
pub enum Confinement {
    Whole { why: String },
    Partition(Arc<SmPartition>),
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Partition(p) => write!(f, "{} of {} sms", p.sms, p.total),
            Self::Whole { why } => write!(f, "every sm ({why})"),
        }
    }
}

/// Applies `share` on `ctx`'s device: the partition it resolves to, made
/// (or reused); the whole device where it resolves to every SM, or where
/// green contexts are missing and the share is `auto`. An explicit count
/// the device cannot honour is an error naming the cause.
pub fn confinement(ctx: &Arc<CudaContext>, share: SmShare) -> Result<Confinement, GreenUnavailable> {
    decide(share, || SmResource::of(ctx), |sms| SmPartition::open(ctx, sms))
}

/// [`confinement`]'s policy, with the device's answers passed in.
fn decide(
    share: SmShare,
    resource: impl FnOnce() -> Result<SmResource, GreenUnavailable>,
    open: impl FnOnce(u32) -> Result<Arc<SmPartition>, GreenUnavailable>,
) -> Result<Confinement, GreenUnavailable> {
    if share == SmShare::All {
        return Ok(Confinement::Whole {
            why: "every sm asked for".into(),
        });
    }
    let opened = resource().and_then(|res| match share.resolve(&res) {
        None => Ok(Confinement::Whole {
            why: format!("{share} sms of {} is the whole device", res.total),
        }),
        Some(sms) => open(sms).map(Confinement::Partition),
    });
    match opened {
        Err(e) if share == SmShare::Auto => Ok(Confinement::Whole { why: e.to_string() }),
        other => other,
    }
}

impl SmResource {
    /// The SMs of `ctx`'s device and how it splits them.
    pub fn of(ctx: &CudaContext) -> Result<Self, GreenUnavailable> {
        let ordinal = ctx.ordinal();
        let device = ctx.cu_device();
        catch_cuda_panic(|| {
            let res = device_sm_resource(device).map_err(|e| unsupported(ordinal, "cuDeviceGetDevResource", e))?;
            // SAFETY: an SM resource, as its type says, so the union's `sm`
            // member is the one the driver wrote.
            let sm = unsafe { res.__bindgen_anon_1.sm };
            Ok(Self {
                total: sm.smCount,
                min_partition: sm.minSmPartitionSize,
                alignment: sm.smCoscheduledAlignment,
            })
        })
    }
}

fn device_sm_resource(device: sys::CUdevice) -> Result<sys::CUdevResource, sys::CUresult> {
    // SAFETY: CUdevResource is plain data for which all zeroes is valid.
    let mut res: sys::CUdevResource = unsafe { std::mem::zeroed() };
    // SAFETY: `res` is a valid out-pointer of the type asked for.
    let r = unsafe { sys::cuDeviceGetDevResource(device, &mut res, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM) };
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(res)
    } else {
        Err(r)
    }
}

fn unsupported(ordinal: usize, call: &str, r: sys::CUresult) -> GreenUnavailable {
    GreenUnavailable::Unsupported {
        ordinal,
        reason: format!("{call} failed: {r:?}"),
    }
}

/// A green context over part of a device's SMs, and the streams it has
/// lent. It lives while something holds it (a `Gpu` of the lanes, say):
/// dropped with no lent stream left, it destroys its streams and the
/// green context, so a loader dropped in a trainer's process gives the
/// context's memory back.
pub struct SmPartition {
    green: sys::CUgreenCtx,
    ctx: Arc<CudaContext>,
    /// SMs it runs on, of `total`.
    pub sms: u32,
    pub total: u32,
    /// Streams made in it, each with its priority and the wrapper last
    /// lent out: one whose wrapper is gone is lent again.
    streams: Mutex<Vec<(sys::CUstream, i32, Weak<CudaStream>)>>,
}

// SAFETY: the green context and stream handles are process-wide driver
// handles, usable from any thread; the list of streams is behind a mutex.
unsafe impl Send for SmPartition {}
// SAFETY: as for Send: nothing here is tied to a thread.
unsafe impl Sync for SmPartition {}

impl fmt::Debug for SmPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SmPartition({} of {} sms)", self.sms, self.total)
    }
}

type Partitions = Mutex<HashMap<(usize, u32), Weak<SmPartition>>>;

impl SmPartition {
    /// The partition of `sms` SMs (a size [`SmShare::resolve`] returned)
    /// on `ctx`'s device: made on first use, then the same one while any
    /// holder keeps it.
    pub fn open(ctx: &Arc<CudaContext>, sms: u32) -> Result<Arc<Self>, GreenUnavailable> {
        static MADE: OnceLock<Partitions> = OnceLock::new();
        let mut made = MADE
            .get_or_init(Partitions::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (ctx.ordinal(), sms);
        if let Some(p) = made.get(&key).and_then(Weak::upgrade) {
            return Ok(p);
        }
        let p = Arc::new(catch_cuda_panic(|| Self::create(ctx, sms))?);
        made.insert(key, Arc::downgrade(&p));
        Ok(p)
    }

    fn create(ctx: &Arc<CudaContext>, sms: u32) -> Result<Self, GreenUnavailable> {
        let ordinal = ctx.ordinal();
        let fail = |call, r| unsupported(ordinal, call, r);
        let all = device_sm_resource(ctx.cu_device()).map_err(|r| fail("cuDeviceGetDevResource", r))?;
        // SAFETY: zeroed CUdevResource values are valid out-parameters.
        let (mut part, mut rest): (sys::CUdevResource, sys::CUdevResource) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let mut groups = 1u32;
        // SAFETY: one group asked for, one result slot given; `all` is the
        // device's SM resource just read.
        let r = unsafe { sys::cuDevSmResourceSplitByCount(&mut part, &mut groups, &all, &mut rest, 0, sms) };
        check(r, |r| fail("cuDevSmResourceSplitByCount", r))?;
        // SAFETY: the split wrote an SM resource into `part`.
        let got = unsafe { part.__bindgen_anon_1.sm.smCount };
        if groups != 1 || got < sms {
            return Err(GreenUnavailable::Unsupported {
                ordinal,
                reason: format!("asked for one group of {sms} sms, the driver split {groups} of {got}"),
            });
        }
        let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
        // SAFETY: one resource, the partition just made.
        let r = unsafe { sys::cuDevResourceGenerateDesc(&mut desc, &mut part, 1) };
        check(r, |r| fail("cuDevResourceGenerateDesc", r))?;
        let mut green: sys::CUgreenCtx = std::ptr::null_mut();
        let flags = sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32;
        // SAFETY: a descriptor of this device's resources; the primary
        // context, which the green one retains, is alive in `ctx`.
        let r = unsafe { sys::cuGreenCtxCreate(&mut green, desc, ctx.cu_device(), flags) };
        check(r, |r| fail("cuGreenCtxCreate", r))?;
        Ok(Self {
            green,
            ctx: Arc::clone(ctx),
            sms: got,
            total: all_sms(&all),
            streams: Mutex::default(),
        })
    }

    /// A non-blocking stream of `priority` whose work runs on this
    /// partition's SMs, for use with its primary context (`ctx`, current on
    /// the calling thread's launches). A stream of that priority no wrapper
    /// holds any more is lent again; the streams live as long as the
    /// partition, and are destroyed with it when none is lent.
    pub fn stream(&self, priority: i32) -> Result<Arc<CudaStream>, GreenUnavailable> {
        let ordinal = self.ctx.ordinal();
        let mut streams = self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = streams
            .iter_mut()
            .find(|(_, p, lent)| *p == priority && lent.strong_count() == 0)
        {
            // SAFETY: a stream of this partition, which lives as long as
            // the partition; no other wrapper of it is alive.
            let s = unsafe { self.ctx.wrap_borrowed_stream(slot.0) };
            slot.2 = Arc::downgrade(&s);
            return Ok(s);
        }
        let mut raw: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: a live green context and a valid out-pointer; the driver
        // clamps a priority outside its range.
        let r = unsafe { sys::cuGreenCtxStreamCreate(&mut raw, self.green, flags, priority) };
        check(r, |r| unsupported(ordinal, "cuGreenCtxStreamCreate", r))?;
        // SAFETY: just created in the green context of this device, kept
        // (in `streams`) as long as the partition.
        let s = unsafe { self.ctx.wrap_borrowed_stream(raw) };
        streams.push((raw, priority, Arc::downgrade(&s)));
        Ok(s)
    }
}

impl Drop for SmPartition {
    fn drop(&mut self) {
        let streams = self
            .streams
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A wrapper still lent (held by a device buffer that frees on its
        // stream, say) may queue work yet: keep everything, as before.
        if streams.iter().any(|(_, _, lent)| lent.strong_count() > 0) {
            tracing::debug!(
                sms = self.sms,
                "a partition's stream is still lent: its green context stays"
            );
            return;
        }
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        for (raw, ..) in streams.drain(..) {
            // SAFETY: a stream this partition created, which no wrapper
            // holds any more: nothing can queue work on it; what was
            // queued finishes before it is destroyed.
            let r = unsafe { sys::cuStreamSynchronize(raw) };
            // SAFETY: as above; destroyed once (drained from the list).
            let d = unsafe { sys::cuStreamDestroy_v2(raw) };
            if r != sys::CUresult::CUDA_SUCCESS || d != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!(?r, ?d, "destroying a partition's stream");
            }
        }
        // SAFETY: the green context this partition created, destroyed
        // once, after every stream made in it.
        let r = unsafe { sys::cuGreenCtxDestroy(self.green) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!(?r, sms = self.sms, "destroying a green context");
        }
    }
}

fn all_sms(res: &sys::CUdevResource) -> u32 {
    // SAFETY: an SM resource, as read by `device_sm_resource`.
    unsafe { res.__bindgen_anon_1.sm.smCount }
}

fn check(r: sys::CUresult, err: impl FnOnce(sys::CUresult) -> GreenUnavailable) -> Result<(), GreenUnavailable> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(err(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: SmResource = SmResource {
        total: 132,
        min_partition: 8,
        alignment: 8,
    };

    #[test]
    fn a_share_reads_as_written() {
        for s in ["all", "auto", "24"] {
            assert_eq!(s.parse::<SmShare>().map(|v| v.to_string()), Ok(s.to_owned()));
        }
        for bad in ["0", "-3", "half", ""] {
            let e = bad.parse::<SmShare>().unwrap_err();
            assert!(e.contains("`all`, `auto` or a count"), "{e}");
        }
    }

    #[test]
    fn a_share_resolves_to_what_the_device_can_split() {
        assert_eq!(SmShare::All.resolve(&H100), None);
        // A count is rounded up to the minimum and the alignment.
        assert_eq!(SmShare::Count(1).resolve(&H100), Some(8));
        assert_eq!(SmShare::Count(9).resolve(&H100), Some(16));
        assert_eq!(SmShare::Count(24).resolve(&H100), Some(24));
        // One that reaches every SM is the whole device.
        assert_eq!(SmShare::Count(129).resolve(&H100), None);
        assert_eq!(SmShare::Count(500).resolve(&H100), None);
        // auto: an eighth, at least 16, on the device's grid.
        assert_eq!(SmShare::Auto.resolve(&H100), Some(16));
        let a100 = SmResource {
            total: 108,
            min_partition: 2,
            alignment: 2,
        };
        assert_eq!(SmShare::Auto.resolve(&a100), Some(16));
        let small = SmResource {
            total: 16,
            min_partition: 2,
            alignment: 2,
        };
        assert_eq!(SmShare::Auto.resolve(&small), None);
    }

    #[test]
    fn without_green_contexts_auto_falls_back_and_a_count_fails() {
        let missing = || {
            Err(GreenUnavailable::Unsupported {
                ordinal: 0,
                reason: "cuDeviceGetDevResource failed: CUDA_ERROR_NOT_SUPPORTED".into(),
            })
        };
        let never = |_| -> Result<Arc<SmPartition>, GreenUnavailable> { panic!("nothing to open") };
        match decide(SmShare::Auto, missing, never) {
            Ok(Confinement::Whole { why }) => assert!(why.contains("no green contexts on cuda device 0"), "{why}"),
            other => panic!("auto should fall back: {other:?}"),
        }
        let e = decide(SmShare::Count(16), missing, never).unwrap_err();
        assert!(e.to_string().contains("CUDA_ERROR_NOT_SUPPORTED"), "{e}");
        // A partition that fails to open falls back the same way.
        let open_fails = |sms| {
            Err(GreenUnavailable::Unsupported {
                ordinal: 0,
                reason: format!("cuGreenCtxCreate failed for {sms}"),
            })
        };
        match decide(SmShare::Auto, || Ok(H100), open_fails) {
            Ok(Confinement::Whole { why }) => assert!(why.contains("cuGreenCtxCreate failed for 16"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(decide(SmShare::Count(8), || Ok(H100), open_fails).is_err());
        // All never asks the device; a count of every SM opens nothing.
        assert!(matches!(
            decide(SmShare::All, || panic!("not asked"), never),
            Ok(Confinement::Whole { .. })
        ));
        match decide(SmShare::Count(200), || Ok(H100), never) {
            Ok(Confinement::Whole { why }) => assert_eq!(why, "200 sms of 132 is the whole device"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_partition_is_made_once_and_lends_its_idle_streams() {
        match crate::open_context(0) {
            // No device here (CI): nothing to partition, and the reason says
            // what is missing.
            Err(e) => assert!(
                e.to_string().starts_with("no ") || e.to_string().contains("fail"),
                "{e}"
            ),
            Ok(ctx) => {
                let res = SmResource::of(&ctx).unwrap_or_else(|e| panic!("{e}"));
                let sms = SmShare::Count(res.min_partition).resolve(&res).expect("a partition");
                let a = SmPartition::open(&ctx, sms).unwrap_or_else(|e| panic!("{e}"));
                let b = SmPartition::open(&ctx, sms).unwrap_or_else(|e| panic!("{e}"));
                assert!(Arc::ptr_eq(&a, &b));
                let s1 = a.stream(0).unwrap_or_else(|e| panic!("{e}"));
                let raw = s1.cu_stream();
                drop(s1);
                // A stream nobody holds is lent again.
                assert_eq!(a.stream(0).unwrap_or_else(|e| panic!("{e}")).cu_stream(), raw);
            }
        }
    }
}
