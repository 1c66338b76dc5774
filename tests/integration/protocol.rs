//! A worker that breaks the protocol is set aside like a failed worker: its
//! item goes to another worker, the epoch goes on, and the report says why.
//!
//! The rule-breaker is a gRPC server of the worker service that answers
//! every item with a sample outside the item's range (no real worker does);
//! a real worker process serves the dataset.

use std::pin::Pin;

use futures::Stream;
use stoker_client::{Loader, LoaderConfig, TransformSpec};
use stoker_proto::pb;
use stoker_proto::pb::worker_server::{Worker as WorkerApi, WorkerServer};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use crate::support::{Worker, image_folder_keys, pack, synth_images};

const SIZE: u32 = 32;

/// Answers each work item with one well-formed sample at a position no
/// item holds.
struct OutOfRange;

#[tonic::async_trait]
impl WorkerApi for OutOfRange {
    async fn describe_dataset(
        &self,
        _request: Request<pb::DescribeDatasetRequest>,
    ) -> Result<Response<pb::DescribeDatasetResponse>, Status> {
        Err(Status::unimplemented("not a real worker"))
    }

    type ProcessShardStream = Pin<Box<dyn Stream<Item = Result<pb::SampleChunk, Status>> + Send>>;

    async fn process_shard(
        &self,
        request: Request<pb::WorkItem>,
    ) -> Result<Response<Self::ProcessShardStream>, Status> {
        let item = request.into_inner();
        let chunk = pb::SampleChunk {
            samples: vec![pb::Sample {
                key: "intruder".into(),
                label: 0,
                height: SIZE,
                width: SIZE,
                channels: 3,
                pixels: vec![0; (SIZE * SIZE * 3) as usize].into(),
                position: 1_000_000,
            }],
            done: true,
            ..pb::SampleChunk::default()
        };
        assert!(item.end == 0 || item.end < 1_000_000, "the test's shards are small");
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(chunk)]))))
    }

    async fn info(&self, _request: Request<pb::InfoRequest>) -> Result<Response<pb::InfoResponse>, Status> {
        Err(Status::unimplemented("not a real worker"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sending_samples_outside_its_item_is_set_aside_and_the_epoch_completes() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 48, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "20K", &[]);
    let expected = image_folder_keys(&images);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad_addr = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerServer::new(OutOfRange))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            }),
    );
    let good = Worker::start(2);

    // The real worker first: it describes the dataset.
    let config = LoaderConfig::new(
        vec![good.addr.clone(), bad_addr.clone()],
        shards.to_str().unwrap(),
        4,
        TransformSpec::train(SIZE),
    );
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let mut got = Vec::new();
    while let Some(batch) = stream.next_batch().await {
        let batch = batch.unwrap();
        got.extend(batch.keys[..batch.real()].iter().cloned());
    }
    got.sort();
    let mut want: Vec<String> = expected.into_iter().map(|(k, _)| k).collect();
    want.sort();
    assert_eq!(got, want, "the epoch is not exactly the dataset");

    let report = stream.report();
    let bad = report.workers.iter().find(|w| w.addr == bad_addr).unwrap();
    let why = bad.set_aside.as_deref().expect("the rule-breaker was not set aside");
    assert!(
        why.contains("position 1000000") && why.contains("outside the item's range"),
        "{why}"
    );
    assert_eq!(bad.samples, 0);
    assert!(report.retries >= 1, "its item was never reassigned");
    let good_report = report.workers.iter().find(|w| w.addr == good.addr).unwrap();
    assert!(good_report.set_aside.is_none());
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
