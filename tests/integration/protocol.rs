//! A worker that breaks the protocol is set aside like a failed worker: its
//! item goes to another worker, the epoch goes on, and the report says why.
//!
//! The rule-breaker is a gRPC server of the worker service that answers a
//! work item with a sample no real worker sends: one just past the item's
//! range, or one whose pixels it says lie in a slot of the client's shared
//! ring that it never wrote. It is the only worker up when the epoch
//! starts, so it is the one that takes the item; a real worker process
//! starts on a listed address once it has broken the rule, and completes
//! the epoch.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use stoker_client::{Loader, LoaderConfig, TransformSpec};
use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use stoker_proto::pb::worker_server::{Worker as WorkerApi, WorkerServer};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use crate::support::{Worker, free_port, image_folder_keys, pack, synth_images};

const SIZE: u32 = 32;

/// The rule a [`Breaker`] breaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// A well-formed sample at the item's `end`, outside its range.
    Range,
    /// A sample in range whose pixels are in ring slot 3, never written:
    /// its `Info` says it runs on this host, so the client offers its ring.
    ForgedSlot,
}

/// Describes the dataset as a real worker did, and answers a work item
/// with one sample that breaks `rule`.
struct Breaker {
    description: pb::DescribeDatasetResponse,
    served: Arc<Notify>,
    rule: Rule,
}

#[tonic::async_trait]
impl WorkerApi for Breaker {
    async fn describe_dataset(
        &self,
        _request: Request<pb::DescribeDatasetRequest>,
    ) -> Result<Response<pb::DescribeDatasetResponse>, Status> {
        Ok(Response::new(self.description.clone()))
    }

    type ProcessShardStream = Pin<Box<dyn Stream<Item = Result<pb::SampleChunk, Status>> + Send>>;

    async fn process_shard(
        &self,
        request: Request<pb::WorkItem>,
    ) -> Result<Response<Self::ProcessShardStream>, Status> {
        let item = request.into_inner();
        assert!(item.end > item.start, "rank 0 of 2 reads a sample range: {item:?}");
        let forged = self.rule == Rule::ForgedSlot;
        if forged {
            assert!(
                item.ring.is_some(),
                "a worker on this host is offered the ring: {item:?}"
            );
        }
        let chunk = pb::SampleChunk {
            samples: vec![pb::Sample {
                key: "intruder".into(),
                label: 0,
                height: SIZE,
                width: SIZE,
                channels: 3,
                pixels: if forged {
                    Vec::new().into()
                } else {
                    vec![0; (SIZE * SIZE * 3) as usize].into()
                },
                position: if forged { item.start } else { item.end },
                fields: Vec::new(),
                ring_slot: forged.then_some(3),
                device_ticket: None,
            }],
            done: true,
            ..pb::SampleChunk::default()
        };
        self.served.notify_one();
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(chunk)]))))
    }

    async fn info(&self, _request: Request<pb::InfoRequest>) -> Result<Response<pb::InfoResponse>, Status> {
        match self.rule {
            Rule::Range => Err(Status::unimplemented("not a real worker")),
            Rule::ForgedSlot => Ok(Response::new(pb::InfoResponse {
                host: stoker_shm::host_identity(),
                ..pb::InfoResponse::default()
            })),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sending_samples_outside_its_item_is_set_aside_and_the_epoch_completes() {
    let why = rule_breaker_is_set_aside(Rule::Range).await;
    assert!(
        why.contains("position 24") && why.contains("outside the item's range 0..24"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_naming_a_ring_slot_it_never_wrote_is_set_aside_and_the_epoch_completes() {
    let why = rule_breaker_is_set_aside(Rule::ForgedSlot).await;
    assert!(
        why.contains("sample intruder") && why.contains("slot 3") && why.contains("not written by this stream"),
        "{why}"
    );
}

/// Runs an epoch whose item first goes to a [`Breaker`] of `rule`, then to
/// a real worker; checks the epoch and returns why the breaker was set aside.
async fn rule_breaker_is_set_aside(rule: Rule) -> String {
    // One shard of 48: rank 0 of 2 reads its samples 0..24, one item.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let shards = dir.path().join("shards");
    synth_images(&images, 48, 2, 64, 48);
    pack(&images, shards.to_str().unwrap(), "100M", &[]);
    let all: Vec<String> = image_folder_keys(&images).into_iter().map(|(k, _)| k).collect();
    let dataset = shards.to_str().unwrap();

    let description = {
        let describer = Worker::start(1);
        let mut client = WorkerClient::connect(format!("http://{}", describer.addr))
            .await
            .unwrap();
        let request = pb::DescribeDatasetRequest {
            dataset: dataset.to_owned(),
            ..pb::DescribeDatasetRequest::default()
        };
        client.describe_dataset(request).await.unwrap().into_inner()
    };
    assert_eq!(description.shards.len(), 1);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad_addr = listener.local_addr().unwrap().to_string();
    let served = Arc::new(Notify::new());
    let fake = Breaker {
        description,
        served: Arc::clone(&served),
        rule,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerServer::new(fake))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            }),
    );
    let good_addr = format!("127.0.0.1:{}", free_port());

    let mut config = LoaderConfig::new(
        vec![bad_addr.clone(), good_addr.clone()],
        dataset,
        4,
        TransformSpec::train(SIZE),
    );
    (config.rank, config.world_size) = (0, 2);
    let loader = Loader::connect(config).await.unwrap();
    let mut stream = loader.epoch(0).unwrap();
    let consume = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.unwrap();
            got.extend(batch.keys[..batch.real()].iter().cloned());
        }
        (got, stream.report())
    });
    // The rule-breaker took the item and broke the rule: now a real worker
    // comes up on the other listed address.
    served.notified().await;
    let good = Worker::start_with(2, &["--listen", &good_addr], &[]);
    let (mut got, report) = consume.await.unwrap();

    got.sort();
    let before = got.len();
    got.dedup();
    assert_eq!(before, got.len(), "a sample arrived twice");
    assert_eq!(got.len(), 24, "{got:?}");
    assert!(got.iter().all(|k| all.contains(k)), "{got:?}");

    let bad = report.workers.iter().find(|w| w.addr == bad_addr).unwrap();
    let why = bad.set_aside.clone().expect("the rule-breaker was not set aside");
    assert_eq!(bad.samples, 0);
    assert!(report.retries >= 1, "its item was never reassigned");
    let good_report = report.workers.iter().find(|w| w.addr == good.addr).unwrap();
    assert!(good_report.set_aside.is_none());
    assert_eq!(good_report.samples, 24);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
    why
}
