//! The hand-over on the device: a GPU worker in the loader's own process
//! (`stoker_cli::embedded`, as `workers="local"` runs it) leaves its
//! images on the loader's device (`stoker_cuda::handoff`), and the
//! loader copies them into its batches there. Every sample arrives once,
//! and each batch is byte for byte what the same lanes give through the
//! host: the images the lanes finish (left on the device, progressive
//! JPEGs decoded alone on the CUDA backend among them), those they hand
//! back to the worker's CPU path (grey, CMYK, a PNG: sent as bytes) and
//! padding, mixed in the same batches. Without a GPU the test
//! prints `skipped: <reason>` and returns; `scripts/gpu-check.sh` runs it
//! on the GPU machine, and under compute-sanitizer.

use std::collections::HashMap;

use stoker_cli::embedded::EmbeddedWorker;
use stoker_client::device::{DType, Layout, UploadSpec};
use stoker_client::{DeviceTarget, LastBatch, Loader, LoaderConfig, TransformSpec};

use crate::gpu::{gpu_dataset, gpu_or_skip};
use crate::support::{image_folder_keys, pack};

const BATCH: usize = 16;
const SIZE: u32 = 64;

/// Each sample's uint8 HWC pixels over one epoch, and how many the
/// worker left on the device; fails on a sample seen twice.
async fn epoch_images(addr: &str, dataset: &str, device: bool, epoch: u64) -> (HashMap<String, Vec<u8>>, u64) {
    let mut config = LoaderConfig::new(vec![addr.to_owned()], dataset, BATCH, TransformSpec::train(SIZE));
    config.seed = 11;
    config.deterministic = true;
    config.last_batch = LastBatch::Pad;
    if device {
        config.device = Some(DeviceTarget {
            ordinal: 0,
            spec: UploadSpec::new(Layout::Nhwc, DType::U8),
        });
    }
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(epoch).unwrap();
    let mut out = HashMap::new();
    let image_bytes = (SIZE * SIZE * 3) as usize;
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        let bytes = match &batch.device {
            Some(on_device) => {
                assert!(device, "a host loader yielded a device batch");
                on_device.to_host().unwrap()
            }
            None => {
                assert!(!device, "a device loader yielded a host batch");
                batch.pixels.to_vec()
            }
        };
        assert_eq!(bytes.len(), batch.len() * image_bytes);
        for (i, key) in batch.keys[..batch.real()].iter().enumerate() {
            let image = bytes[i * image_bytes..(i + 1) * image_bytes].to_vec();
            assert!(out.insert(key.clone(), image).is_none(), "{key} twice");
        }
        // Padding repeats a real sample of this rank, bytes included.
        for i in batch.real()..batch.len() {
            let pad = &bytes[i * image_bytes..(i + 1) * image_bytes];
            assert!(
                out.values().any(|v| v[..] == *pad),
                "padding {i} of batch {} repeats no delivered image",
                batch.index
            );
        }
    }
    let left = stream.report().workers.iter().map(|w| w.device_samples).sum();
    (out, left)
}

/// `gpu_dataset` with `per_class` images a class, packed: the folder, the
/// shards' path and the image keys.
fn packed(per_class: usize) -> (tempfile::TempDir, String, Vec<(String, i64)>) {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    gpu_dataset(&images, per_class);
    pack(&images, shards.to_str().unwrap(), "2M", &[]);
    let keys = image_folder_keys(&images);
    (dir, shards.to_str().unwrap().to_owned(), keys)
}

/// A GPU worker in this process, as `workers="local"` runs it;
/// --gpu-only: no CPU thread takes a JPEG from the lanes, so which path
/// makes a sample does not depend on timing.
fn in_process_worker() -> EmbeddedWorker {
    EmbeddedWorker::start([
        "--listen",
        "127.0.0.1:0",
        "--device",
        "cuda",
        "--gpu-only",
        "--grace-period",
        "0",
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_handoff_leaves_the_lanes_images_on_the_loaders_device() {
    if gpu_or_skip("gpu_handoff_leaves_the_lanes_images_on_the_loaders_device").is_none() {
        return;
    }
    let (_dir, shards, keys) = packed(60);
    let shards = shards.as_str();
    // Less the truncated JPEG, which both paths skip.
    let expected = keys.len() - 1;
    let worker = in_process_worker();
    let addr = worker.addr().to_owned();
    for epoch in 0..2 {
        let (kept, left) = epoch_images(&addr, shards, true, epoch).await;
        let (sent, not_left) = epoch_images(&addr, shards, false, epoch).await;
        assert_eq!(kept.len(), expected, "epoch {epoch}: every sample once on the device");
        assert_eq!(
            sent.len(),
            expected,
            "epoch {epoch}: every sample once through the host"
        );
        // The grey and CMYK JPEGs and the PNG go to the worker's CPU path
        // and come as bytes: not every sample is left on the device.
        assert!(
            left > 0 && left < expected as u64,
            "epoch {epoch}: {left} of {expected} left on the device"
        );
        assert_eq!(not_left, 0, "a host loader offers no sink");
        let differ: Vec<&String> = kept.keys().filter(|k| kept[*k] != sent[*k]).collect();
        assert!(
            differ.is_empty(),
            "epoch {epoch}: {} of {expected} images differ between the hand-over and the host path: {:?}",
            differ.len(),
            &differ[..differ.len().min(5)]
        );
        println!(
            "gpu handoff epoch {epoch}: {left} of {expected} images left on the device, every one as through the host"
        );
    }
    worker.stop().unwrap();
}

/// A panic in the lanes' host work of an in-process worker (the header
/// read of one chosen image, injected) hands that image to the worker's
/// CPU path: the trainer's process lives on, and every sample of the
/// epoch arrives once, the others still on the device.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_handoff_a_panic_in_the_lanes_host_work_costs_no_sample() {
    use stoker_worker::failpoint::{GPU_PLAN_PANIC, clear, configure};
    if gpu_or_skip("gpu_handoff_a_panic_in_the_lanes_host_work_costs_no_sample").is_none() {
        return;
    }
    let (_dir, shards, keys) = packed(30);
    let expected = keys.len() - 1;
    let chosen = keys
        .iter()
        .map(|(k, _)| k.clone())
        .find(|k| !k.starts_with("odd/"))
        .unwrap();
    // Process-wide, as the worker runs here: removed at the end, and
    // gpu-check runs the GPU tests one at a time.
    configure(&format!("{GPU_PLAN_PANIC}=return({chosen})")).unwrap();
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            clear(GPU_PLAN_PANIC);
        }
    }
    let _clear = Clear;
    let worker = in_process_worker();
    for epoch in 0..2 {
        let (got, left) = epoch_images(worker.addr(), &shards, true, epoch).await;
        assert_eq!(got.len(), expected, "epoch {epoch}: every sample once");
        assert!(
            got.contains_key(&chosen),
            "epoch {epoch}: {chosen} was lost to the panic"
        );
        assert!(
            left > 0 && left < expected as u64,
            "epoch {epoch}: {left} left on the device"
        );
    }
    assert!(!worker.is_finished(), "the in-process worker stopped after the panic");
    worker.stop().unwrap();
}
