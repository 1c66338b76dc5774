//! The worker's gRPC API in-process: `serve` on 127.0.0.1:0 with an injected
//! shutdown signal, requests with absurd values, health, clean exit.

use std::sync::Arc;

use stoker_proto::pb;
use stoker_proto::pb::worker_client::WorkerClient;
use stoker_worker::{ServeOptions, WorkerConfig, WorkerContext, serve};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

async fn start() -> (
    String,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    let ctx = Arc::new(
        WorkerContext::new(WorkerConfig {
            threads: 1,
            ..WorkerConfig::default()
        })
        .unwrap(),
    );
    let (tx, rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(serve(listener, ctx, ServeOptions::default(), async {
        let _ = rx.await;
    }));
    (addr, tx, handle)
}

/// Stops the worker `start` began and checks that `serve` returns cleanly.
async fn shut_down(stop: oneshot::Sender<()>, server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>) {
    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("serve returns after shutdown")
        .unwrap()
        .unwrap();
}

fn item(size: u32, spec: pb::TransformSpec) -> pb::WorkItem {
    pb::WorkItem {
        dataset: "/tmp".into(),
        shard: "x.tar".into(),
        seed: 0,
        epoch: 0,
        transform: Some(pb::TransformSpec { size, ..spec }),
        skip_keys: vec![],
        chunk_bytes: 0,
        start: 0,
        end: 0,
        mode: 0,
        ..pb::WorkItem::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_requests_get_invalid_argument_and_the_worker_shuts_down_cleanly() {
    let (addr, stop, server) = start().await;
    let mut client = WorkerClient::connect(addr.clone()).await.unwrap();
    let train = |size| stoker_proto::spec_to_pb(&stoker_core::TransformSpec::train(size));
    // An older client's ops (no JSON).
    let legacy = |ops: Vec<pb::Transform>| pb::TransformSpec {
        ops,
        ..pb::TransformSpec::default()
    };
    let center_crop = pb::Transform {
        op: Some(pb::transform::Op::CenterCrop(pb::CenterCrop { size: 224 })),
    };
    let json = |json: &str| pb::TransformSpec {
        json: json.to_owned(),
        ..pb::TransformSpec::default()
    };

    let cases = [
        ("image size 0", item(0, legacy(vec![center_crop]))),
        ("image size 100000", item(100_000, train(100_000))),
        (
            "unknown transform op",
            item(224, legacy(vec![pb::Transform { op: None }])),
        ),
        (
            "unknown op in the JSON spec",
            item(224, json(r#"{"version": 1, "ops": [{"op": "Lambda"}]}"#)),
        ),
        (
            "a spec version this worker does not know",
            item(
                224,
                json(r#"{"version": 99, "ops": [{"op": "CenterCrop", "size": 224}]}"#),
            ),
        ),
        (
            "a negative argument",
            item(
                224,
                json(
                    r#"{"version": 1, "ops": [{"op": "RandomRotation", "degrees": -5}, {"op": "CenterCrop", "size": 224}]}"#,
                ),
            ),
        ),
        (
            "no transform",
            pb::WorkItem {
                transform: None,
                ..item(224, train(224))
            },
        ),
        (
            "no shard",
            pb::WorkItem {
                shard: String::new(),
                ..item(224, train(224))
            },
        ),
        (
            "empty sample range",
            pb::WorkItem {
                start: 5,
                end: 5,
                ..item(224, train(224))
            },
        ),
        (
            "unknown shard format",
            pb::WorkItem {
                format: 99,
                ..item(224, train(224))
            },
        ),
        (
            "bad dataset uri",
            pb::WorkItem {
                dataset: "gs://bucket/x".into(),
                ..item(224, train(224))
            },
        ),
    ];
    for (what, request) in cases {
        let status = client.process_shard(request).await.expect_err(what);
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{what}: {status:?}");
        assert!(!status.message().is_empty(), "{what}: empty message");
    }

    // A missing shard is NOT_FOUND, named.
    let mut stream = client.process_shard(item(32, train(32))).await.unwrap().into_inner();
    let status = stream.message().await.expect_err("missing shard");
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(status.message().contains("x.tar"), "{status:?}");

    // Still healthy after all that, and serving.
    let channel = tonic::transport::Endpoint::from_shared(addr)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let reply = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "stoker.v1.Worker".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.status(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    let info = client.info(pb::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.device, "cpu");

    drop(client);
    drop(health);
    shut_down(stop, server).await;
}

/// `ProcessShard`'s hand-framed response (pixels chained, not encoded:
/// `stoker_proto::chained`) is plain gRPC: tonic's generated client, as
/// an older stoker client or any other gRPC client would use, reads a real
/// shard's samples from it, every one whole and each chunk a message of
/// its own (small chunks, so the item takes many).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_grpc_client_reads_the_chained_response() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    crate::support::synth_images(&images, 24, 2, 96, 80);
    let shards = dir.path().join("shards");
    crate::support::pack(&images, shards.to_str().unwrap(), "100M", &[]);
    let (addr, stop, server) = start().await;
    let mut client = WorkerClient::connect(addr).await.unwrap();
    let request = pb::WorkItem {
        dataset: shards.to_str().unwrap().into(),
        shard: "shard-000000.tar".into(),
        chunk_bytes: 40_000,
        ..item(48, stoker_proto::spec_to_pb(&stoker_core::TransformSpec::train(48)))
    };
    let mut stream = client.process_shard(request).await.unwrap().into_inner();
    let (mut chunks, mut keys, mut done) = (0, std::collections::BTreeSet::new(), false);
    while let Some(chunk) = stream.message().await.unwrap() {
        assert!(!done, "a chunk after the last");
        chunks += 1;
        done = chunk.done;
        for s in chunk.samples {
            assert_eq!((s.height, s.width, s.channels), (48, 48, 3), "{}", s.key);
            assert_eq!(s.pixels.len(), 48 * 48 * 3, "{}", s.key);
            assert!(s.pixels.iter().any(|&p| p != 0), "{}: blank pixels", s.key);
            assert!(keys.insert(s.key.clone()), "{} twice", s.key);
        }
    }
    assert!(done, "the stream ended with its last chunk");
    println!("generated grpc client: {} samples in {chunks} chunks", keys.len());
    assert_eq!(keys.len(), 24);
    assert!(chunks >= 3, "{chunks} chunks: each holds at most a few 6.9 KB samples");
    drop(client);
    shut_down(stop, server).await;
}
