//! The client's device upload (`stoker_client::device`) on a real GPU:
//! every dtype x layout against a host reference, the pinned ring's reuse
//! rule, a consumer stream waiting on a batch (and the batch's memory
//! outliving the consumer's use), and the upload rate. Without a usable GPU
//! each test prints `skipped: <test>: <reason>` and returns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut, PinnedHostSlice, sys};
use stoker_client::device::{self, DType, DeviceBatch, ForeignStream, Layout, PinnedPool, UploadSpec, Uploader};
use stoker_cuda::{Normalize, host};

const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Whether device 0 can take uploads; prints why not, as a skip.
fn device_or_skip(test: &str) -> bool {
    match device::probe(0) {
        Ok(info) => {
            println!("{test}: {info}");
            true
        }
        Err(reason) => {
            crate::support::Need::Gpu.skip(test, reason);
            false
        }
    }
}

/// `len` pseudo-random bytes from `seed` (xorshift), every value present.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Writes `content` to the front of a buffer of `pool` and uploads it.
fn upload(up: &Uploader, pool: &PinnedPool, content: &[u8], images: usize, h: u32, w: u32) -> DeviceBatch {
    let mut buf = pool.get_blocking().unwrap();
    buf[..content.len()].copy_from_slice(content);
    up.upload(buf, images, h, w, &[]).unwrap()
}

/// The spec's normalisation, as the kernels take it.
fn norm_of(spec: &UploadSpec) -> Normalize {
    spec.conversion().unwrap().norm
}

/// What `batch` should hold for `content`, bit for bit (the kernels'
/// arithmetic on the host).
fn reference(spec: &UploadSpec, content: &[u8], images: usize, h: u32, w: u32) -> Vec<u8> {
    host::convert(content, images, (w, h), spec.layout, spec.dtype, &norm_of(spec))
}

/// Checks a converted batch against (x / 255 - mean) / std computed here in
/// f64, independently of the kernels' folding into one multiply-add, within
/// the output type's rounding. Returns the worst error seen.
fn check_values(spec: &UploadSpec, content: &[u8], got: &[u8], images: usize, h: u32, w: u32) -> f64 {
    let hw = h as usize * w as usize;
    let size = spec.dtype.size();
    assert_eq!(got.len(), images * hw * 3 * size);
    let mut worst = 0.0f64;
    for b in 0..images {
        for p in 0..hw {
            for c in 0..3 {
                let x = content[(b * hw + p) * 3 + c];
                let at = match spec.layout {
                    Layout::Nchw => (b * 3 + c) * hw + p,
                    Layout::Nhwc => (b * hw + p) * 3 + c,
                };
                let bytes = &got[at * size..(at + 1) * size];
                let want = (f64::from(x) / 255.0 - f64::from(spec.mean[c])) / f64::from(spec.std[c]);
                // The f32 multiply-add is within 1e-6 of the exact value on
                // this scale; float16 and bfloat16 then round to half an ulp.
                let f32_error = 1e-6 * want.abs().max(1.0);
                let (value, tolerance) = match spec.dtype {
                    DType::U8 => {
                        assert_eq!(bytes[0], x, "{spec:?}: image {b} pixel {p} channel {c}");
                        continue;
                    }
                    DType::F32 => {
                        let v = f32::from_le_bytes(bytes.try_into().unwrap());
                        (f64::from(v), f32_error)
                    }
                    DType::F16 => {
                        let v = host::f16_to_f32(u16::from_le_bytes(bytes.try_into().unwrap()));
                        (f64::from(v), 2f64.powi(-11) * want.abs() + 2f64.powi(-25) + f32_error)
                    }
                    DType::Bf16 => {
                        let v = host::bf16_to_f32(u16::from_le_bytes(bytes.try_into().unwrap()));
                        (f64::from(v), 2f64.powi(-8) * want.abs() + f32_error)
                    }
                };
                let err = (value - want).abs();
                assert!(
                    err <= tolerance,
                    "{spec:?}: image {b} pixel {p} channel {c}: byte {x} gave {value}, expected {want} (error {err:e})"
                );
                worst = worst.max(err / want.abs().max(1e-3));
            }
        }
    }
    worst
}

#[test]
fn client_device_probe_reports_the_device() {
    if !device_or_skip("client_device_probe_reports_the_device") {
        return;
    }
    let info = device::probe(0).unwrap();
    assert!(info.compute_capability.0 >= 7, "{info}");
    let far = device::probe(1 << 16).expect_err("no such device");
    assert!(far.to_string().contains("device 65536"), "{far}");
}

#[test]
fn client_device_converts_every_dtype_and_layout() {
    let test = "client_device_converts_every_dtype_and_layout";
    if !device_or_skip(test) {
        return;
    }
    // (images, height, width): odd sizes take the one-per-thread path,
    // sizes with H x W a multiple of 4 the vectorised one.
    let sizes = [(3usize, 29u32, 37u32), (4, 24, 32), (1, 1, 1), (2, 224, 224)];
    println!("client-convert dtype     layout  images  size      worst-rel-err");
    for layout in [Layout::Nchw, Layout::Nhwc] {
        for dtype in [DType::U8, DType::F32, DType::F16, DType::Bf16] {
            let mut specs = vec![UploadSpec::new(layout, dtype)];
            if dtype != DType::U8 {
                specs.push(UploadSpec::new(layout, dtype).with_mean_std(IMAGENET_MEAN, IMAGENET_STD));
            }
            for spec in specs {
                let up = Uploader::new(0, spec).unwrap();
                let most = sizes
                    .iter()
                    .map(|&(n, h, w)| n * h as usize * w as usize * 3)
                    .max()
                    .unwrap();
                let pool = up.pinned_pool(2, most).unwrap();
                for (i, &(images, h, w)) in sizes.iter().enumerate() {
                    let content = pattern(i as u64 + 1, images * h as usize * w as usize * 3);
                    let batch = upload(&up, &pool, &content, images, h, w);
                    assert_eq!(batch.shape(), layout.shape(images, h, w));
                    assert_eq!((batch.dtype(), batch.layout(), batch.ordinal()), (dtype, layout, 0));
                    assert_eq!(batch.byte_len(), content.len() * dtype.size());
                    assert_ne!(batch.device_ptr(), 0);
                    batch.synchronize().unwrap();
                    assert!(batch.is_ready().unwrap());
                    let got = batch.to_host().unwrap();
                    let worst = check_values(&spec, &content, &got, images, h, w);
                    // Bit for bit the kernels' arithmetic: one fused
                    // multiply-add in f32, rounded to nearest even.
                    let want = reference(&spec, &content, images, h, w);
                    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
                    assert_eq!(
                        differ, 0,
                        "{spec:?} {images}x{h}x{w}: {differ} bytes differ from the host reference"
                    );
                    println!(
                        "client-convert {:<8} {:<7} {images:>6}  {h:>3}x{w:<4}  {worst:.2e}{}",
                        dtype.name(),
                        layout.name(),
                        if spec.mean == [0.0; 3] {
                            ""
                        } else {
                            "  (imagenet mean/std)"
                        }
                    );
                }
            }
        }
    }
}

/// Images a GPU lane left on the device (`stoker_cuda::handoff`), here
/// written on a stream of another context object as a lane's are, land in
/// their rows of a batch whose other rows come from the pinned buffer: the
/// batch is bit for bit the host path's, in every dtype and layout; a
/// batch all on the device needs no host bytes at all. The lane outputs
/// are dropped right after the upload is queued: their memory is freed
/// only after the batch's copies (compute-sanitizer's memcheck, which
/// gpu-check runs on this test, tracks stream-ordered frees).
#[test]
fn client_device_takes_images_left_on_the_device() {
    use stoker_cuda::handoff::{DeviceOutput, DevicePixels};
    let test = "client_device_takes_images_left_on_the_device";
    if !device_or_skip(test) {
        return;
    }
    let (images, h, w) = (6usize, 24u32, 40u32);
    let image_bytes = h as usize * w as usize * 3;
    let content = pattern(99, images * image_bytes);
    // A "lane": its own context object and stream, event tracking off.
    let lane_ctx = CudaContext::new(0).unwrap();
    // SAFETY: the slices below are used on their own stream only, and
    // handed over through the output's events, as the worker's lanes do.
    unsafe { lane_ctx.disable_event_tracking() };
    let lane = lane_ctx.new_stream().unwrap();
    for spec in [
        UploadSpec::new(Layout::Nhwc, DType::U8),
        UploadSpec::new(Layout::Nchw, DType::Bf16).with_mean_std(IMAGENET_MEAN, IMAGENET_STD),
        UploadSpec::new(Layout::Nhwc, DType::F32),
    ] {
        let up = Uploader::new(0, spec).unwrap();
        let pool = up.pinned_pool(2, content.len()).unwrap();
        for rows in [vec![1usize, 4, 5], (0..images).collect::<Vec<_>>()] {
            // The rows on the device, in two outputs (two lane batches),
            // each output holding them in reverse order at an offset.
            let mut on_device = Vec::new();
            for part in rows.chunks(2) {
                let mut bytes = vec![0xa5u8; 7];
                for &r in part.iter().rev() {
                    bytes.extend_from_slice(&content[r * image_bytes..(r + 1) * image_bytes]);
                }
                let output = DeviceOutput::new(lane.clone_htod(&bytes).unwrap(), &lane).unwrap();
                for (j, &r) in part.iter().rev().enumerate() {
                    let pixels = DevicePixels::new(&output, 7 + j * image_bytes, image_bytes).unwrap();
                    on_device.push((r, pixels));
                }
            }
            let mut buf = pool.get_blocking().unwrap();
            buf[..content.len()].fill(0);
            for r in (0..images).filter(|r| !rows.contains(r)) {
                buf[r * image_bytes..(r + 1) * image_bytes]
                    .copy_from_slice(&content[r * image_bytes..(r + 1) * image_bytes]);
            }
            let batch = up.upload(buf, images, h, w, &on_device).unwrap();
            drop(on_device);
            let got = batch.to_host().unwrap();
            let want = reference(&spec, &content, images, h, w);
            let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(
                differ, 0,
                "{spec:?}, rows {rows:?} on the device: {differ} bytes differ"
            );
        }
        // A row past the batch, or of the wrong size, is refused.
        let output = DeviceOutput::new(lane.clone_htod(&content).unwrap(), &lane).unwrap();
        for (row, len) in [(images, image_bytes), (0, image_bytes - 1)] {
            let pixels = DevicePixels::new(&output, 0, len).unwrap();
            let err = up
                .upload(pool.get_blocking().unwrap(), images, h, w, &[(row, pixels)])
                .expect_err("refused");
            assert!(err.to_string().contains("left on cuda device"), "{err}");
        }
    }
    println!("{test}: every dtype and layout bit for bit with rows on the device");
}

#[test]
fn client_device_refuses_uploads_that_do_not_fit() {
    let test = "client_device_refuses_uploads_that_do_not_fit";
    if !device_or_skip(test) {
        return;
    }
    let up = Uploader::new(0, UploadSpec::new(Layout::Nchw, DType::F16)).unwrap();
    let pool = up.pinned_pool(1, 1000).unwrap();
    for (images, h, w, what) in [
        (1usize, 20u32, 20u32, "need 1200 bytes"),
        (0, 4, 4, "out of range"),
        (1, 0, 4, "out of range"),
        (usize::MAX / 4, 8, 8, "overflow"),
    ] {
        let e = up
            .upload(pool.get_blocking().unwrap(), images, h, w, &[])
            .expect_err("refused");
        assert!(e.to_string().contains(what), "{images} x {h}x{w}: {e}");
    }
    // Each refusal put the only buffer back.
    assert!(pool.try_get().unwrap().is_some());
    let other = Uploader::new(0, UploadSpec::new(Layout::Nhwc, DType::U8)).unwrap();
    let foreign = PinnedPool::new(0, 1, 64).unwrap();
    // Another pool of the same device's primary context is accepted.
    other
        .upload(foreign.get_blocking().unwrap(), 1, 2, 2, &[])
        .unwrap()
        .synchronize()
        .unwrap();
}

/// Holds a stream at a point until opened: `cuStreamWaitValue32` on a
/// page-locked word the host then sets. Opening it (also on drop, so a
/// failed test cannot leave the device stuck) lets the stream run on.
struct Gate {
    /// Owns the word `ptr` points to.
    _flag: PinnedHostSlice<u32>,
    ptr: *mut u32,
    stream: Arc<CudaStream>,
    open: bool,
}

impl Gate {
    /// A closed gate on `stream`, or why the device cannot do it.
    fn close(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Self, String> {
        // SAFETY: a u32 of page-locked memory, written below before use.
        let mut flag = unsafe { ctx.alloc_pinned_with_flags::<u32>(1, sys::CU_MEMHOSTALLOC_DEVICEMAP) }
            .map_err(|e| e.to_string())?;
        let ptr = flag.as_mut_ptr().map_err(|e| e.to_string())?;
        // SAFETY: `ptr` is the one u32 just allocated.
        unsafe { ptr.write_volatile(0) };
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is page-locked memory of this context; `dptr` is a
        // valid out-pointer.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, ptr.cast(), 0) }
            .result()
            .map_err(|e| format!("cuMemHostGetDevicePointer: {e}"))?;
        let flags = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: a live stream of this context and the device address of
        // the flag, which outlives the wait (the drop synchronises first).
        unsafe { sys::cuStreamWaitValue32_v2(stream.cu_stream(), dptr, 1, flags) }
            .result()
            .map_err(|e| format!("cuStreamWaitValue32: {e}"))?;
        Ok(Self {
            _flag: flag,
            ptr,
            stream: Arc::clone(stream),
            open: false,
        })
    }

    fn open(&mut self) {
        if !self.open {
            // SAFETY: `ptr` is the flag's u32, alive as long as `self`.
            unsafe { self.ptr.write_volatile(1) };
            self.open = true;
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
        // The stream may still be reading the flag: let it pass before the
        // word is freed.
        self.stream.synchronize().unwrap_or_else(|e| eprintln!("gate: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_device_ring_reuses_a_buffer_only_after_its_copy() {
    let test = "client_device_ring_reuses_a_buffer_only_after_its_copy";
    if !device_or_skip(test) {
        return;
    }
    let spec = UploadSpec::new(Layout::Nchw, DType::Bf16).with_mean_std(IMAGENET_MEAN, IMAGENET_STD);
    let up = Uploader::new(0, spec).unwrap();
    let (images, h, w) = (16usize, 112u32, 112u32);
    let len = images * h as usize * w as usize * 3;
    let pool = up.pinned_pool(2, len).unwrap();
    let mut sent: Vec<(Vec<u8>, DeviceBatch)> = Vec::new();

    // Hold the side stream: the two buffers go into copies that cannot run,
    // so neither may be handed out again.
    match Gate::close(up.side_stream().context(), up.side_stream()) {
        Ok(mut gate) => {
            for i in 0..2 {
                let content = pattern(100 + i, len);
                let mut buf = pool.get().await.unwrap();
                buf[..len].copy_from_slice(&content);
                sent.push((content, up.upload(buf, images, h, w, &[]).unwrap()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                pool.try_get().unwrap().is_none(),
                "a buffer was handed out before its copy ran"
            );
            assert!(
                !sent[0].1.is_ready().unwrap(),
                "the batch is ready behind a closed gate"
            );
            let waiting = pool.clone();
            let waiter = tokio::spawn(async move { waiting.get().await.map(|b| b.index()) });
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(!waiter.is_finished(), "get() returned while both copies were held");
            gate.open();
            let index = tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("get() returns once a copy completes")
                .unwrap()
                .unwrap();
            println!("{test}: buffer {index} handed out after the gate opened");
        }
        Err(why) => println!("{test}: no stream gate on this device ({why}); checking the ring without it"),
    }

    // Twenty uploads of distinct content through the ring of two, never
    // waiting on the GPU: a buffer refilled before its copy finished would
    // show in an earlier batch.
    while sent.len() < 20 {
        let content = pattern(200 + sent.len() as u64, len);
        let mut buf = pool.get().await.unwrap();
        buf[..len].copy_from_slice(&content);
        sent.push((content, up.upload(buf, images, h, w, &[]).unwrap()));
    }
    for (i, (content, batch)) in sent.iter().enumerate() {
        let got = batch.to_host().unwrap();
        assert!(
            got == reference(&spec, content, images, h, w),
            "batch {i} does not hold its own content"
        );
    }
    println!("{test}: 20 uploads through a ring of 2 buffers, each batch intact");
}

/// Queues a copy of `batch` on `stream` (a raw handle) into `dst`, a
/// buffer of `owner`'s, allocated (and settled) beforehand: nothing here may
/// wait for the device while a gate holds the side stream.
fn copy_on(batch: &DeviceBatch, stream: sys::CUstream, dst: &mut CudaSlice<u8>, owner: &Arc<CudaStream>) {
    assert!(dst.len() >= batch.byte_len());
    let (dptr, record) = dst.device_ptr_mut(owner);
    // SAFETY: both allocations hold `byte_len` bytes and live past the
    // copy (the batch until its drop orders its free after `stream`, the
    // destination until it is read after synchronising); `stream` is a live
    // stream of this context or null.
    unsafe { cudarc::driver::result::memcpy_dtod_async(dptr, batch.device_ptr(), batch.byte_len(), stream) }.unwrap();
    drop(record);
}

#[test]
fn client_device_wait_on_orders_a_consumer_stream() {
    let test = "client_device_wait_on_orders_a_consumer_stream";
    if !device_or_skip(test) {
        return;
    }
    let spec = UploadSpec::new(Layout::Nhwc, DType::F32);
    let up = Uploader::new(0, spec).unwrap();
    let ctx = Arc::clone(up.side_stream().context());
    let (images, h, w) = (8usize, 64u32, 64u32);
    let len = images * h as usize * w as usize * 3;
    let pool = up.pinned_pool(3, len).unwrap();
    let consumer = ctx.new_stream().unwrap();
    let mut first = consumer.alloc_zeros::<u8>(len * 4).unwrap();
    let mut second = consumer.alloc_zeros::<u8>(len * 4).unwrap();
    consumer.synchronize().unwrap();

    // A stream of cudarc's: held by the gate, the batch is not ready, and
    // the consumer's copy waits for it.
    let gate = Gate::close(&ctx, up.side_stream());
    let content = pattern(7, len);
    let batch = upload(&up, &pool, &content, images, h, w);
    batch.wait_on_stream(&consumer).unwrap();
    copy_on(&batch, consumer.cu_stream(), &mut first, &consumer);
    let copied = consumer.record_event(None).unwrap();
    let mut gate = match gate {
        Ok(gate) => {
            std::thread::sleep(Duration::from_millis(100));
            assert!(!batch.is_ready().unwrap());
            assert!(
                !copied.is_complete(),
                "the consumer's copy ran before the batch was ready"
            );
            Some(gate)
        }
        Err(why) => {
            println!("{test}: no stream gate on this device ({why}); checking the order without it");
            None
        }
    };
    // Dropped before it is ready and before the consumer's copy ran: the
    // free must wait for both. A second upload may then reuse the memory.
    drop(batch);
    let other = upload(&up, &pool, &pattern(8, len), images, h, w);
    if let Some(gate) = gate.as_mut() {
        gate.open();
    }
    let got = consumer.clone_dtoh(&first).unwrap();
    consumer.synchronize().unwrap();
    assert!(
        got == reference(&spec, &content, images, h, w),
        "the consumer read something else"
    );
    other.synchronize().unwrap();
    drop(gate);

    // A raw handle: the legacy default stream (null).
    let gate = Gate::close(&ctx, up.side_stream()).ok();
    let content = pattern(9, len);
    let batch = upload(&up, &pool, &content, images, h, w);
    batch.wait_on(&ForeignStream::legacy_default()).unwrap();
    let legacy = ctx.default_stream();
    copy_on(&batch, std::ptr::null_mut(), &mut second, &consumer);
    let copied = legacy.record_event(None).unwrap();
    if gate.is_some() {
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !copied.is_complete(),
            "the legacy stream's copy ran before the batch was ready"
        );
    }
    drop(gate);
    copied.synchronize().unwrap();
    let got = consumer.clone_dtoh(&second).unwrap();
    consumer.synchronize().unwrap();
    assert!(
        got == reference(&spec, &content, images, h, w),
        "the legacy stream read something else"
    );
    drop(batch);
    ctx.synchronize().unwrap();
    println!("{test}: a cudarc stream and the legacy default stream waited for their batches");
}

/// Seconds for `n` uploads of `images` x 224 x 224 through `pool`, a few
/// batches in flight, the device synchronised before the clock stops.
fn timed_uploads(up: &Uploader, pool: &PinnedPool, n: usize, images: usize) -> f64 {
    let start = Instant::now();
    let mut in_flight = VecDeque::new();
    for _ in 0..n {
        let buf = pool.get_blocking().unwrap();
        in_flight.push_back(up.upload(buf, images, 224, 224, &[]).unwrap());
        if in_flight.len() > pool.count() {
            in_flight.pop_front();
        }
    }
    up.side_stream().synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64();
    drop(in_flight);
    secs
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn client_device_upload_throughput() {
    let test = "client_device_upload_throughput";
    if !device_or_skip(test) {
        return;
    }
    let (images, n, runs) = (256usize, 16usize, 5usize);
    let input = images * 224 * 224 * 3;

    // The reference: plain page-locked host-to-device copies of the same size.
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    // SAFETY: the bytes are only copied to the device, never read as values.
    let host = unsafe { ctx.alloc_pinned_with_flags::<u8>(input, 0) }.unwrap();
    let mut dev = stream.alloc_zeros::<u8>(input).unwrap();
    stream.memcpy_htod(&host, &mut dev).unwrap();
    stream.synchronize().unwrap();
    let raw: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..n {
                stream.memcpy_htod(&host, &mut dev).unwrap();
            }
            stream.synchronize().unwrap();
            (n * input) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    println!(
        "client-upload pinned memcpy only, {:.1} MB: median {:.1} GB/s  (runs {:?})",
        input as f64 / 1e6,
        median(raw.clone()),
        raw.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>()
    );

    for spec in [
        UploadSpec::new(Layout::Nchw, DType::Bf16).with_mean_std(IMAGENET_MEAN, IMAGENET_STD),
        UploadSpec::new(Layout::Nchw, DType::F32).with_mean_std(IMAGENET_MEAN, IMAGENET_STD),
        UploadSpec::new(Layout::Nhwc, DType::U8),
    ] {
        let up = Uploader::new(0, spec).unwrap();
        let pool = up.pinned_pool(3, input).unwrap();
        timed_uploads(&up, &pool, 4, images); // warm-up: staging, memory pool
        let secs: Vec<f64> = (0..runs).map(|_| timed_uploads(&up, &pool, n, images)).collect();
        let best = median(secs.clone());
        let gbs = (n * input) as f64 / best / 1e9;
        println!(
            "client-upload {} {} {images}x224x224x3 via a ring of 3: median {gbs:.1} GB/s of uint8 into device memory, \
             {:.0} images/s, {:.1} GB/s written  (runs {:?} s)",
            spec.dtype.name(),
            spec.layout.name(),
            (n * images) as f64 / best,
            gbs * spec.dtype.size() as f64,
            secs.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>()
        );
        assert!(gbs > 1.0, "{gbs} GB/s is far below any PCIe link");
    }
}
