//! `stoker doctor`: which stage of the input pipeline holds the rate down,
//! and how many workers a target rate needs (`stoker_client::doctor`).

use clap::Args;
use serde::Serialize;
use stoker_client::doctor::{Diagnosis, StageRate};
use stoker_client::{Loader, LoaderConfig};

use crate::human_bytes;
use crate::stream::DeviceArgs;

/// Default size of the measured subset (`--samples`).
pub const DEFAULT_DOCTOR_SAMPLES: u64 = 2048;
/// Default minimum time of each stage (`--seconds`).
pub const DEFAULT_DOCTOR_SECONDS: f64 = 2.0;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Workers, comma-separated: HOST:PORT or dns://NAME:PORT.
    #[arg(long, value_delimiter = ',', required = true)]
    pub workers: Vec<String>,
    /// s3://bucket/prefix/, file:///abs/dir/ or a path, as workers see it
    /// (a relative path is made absolute from this directory first).
    #[arg(long)]
    pub dataset: String,
    /// Samples per batch, as training would ask.
    #[arg(long)]
    pub batch_size: usize,
    #[command(flatten)]
    pub transform: crate::transform::TransformArgs,
    /// Where the client lands batches: with a GPU, the client stage
    /// includes the upload and conversion.
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub format: crate::stream::FormatArgs,
    /// Images/s the fleet should deliver (default: what this client can
    /// ingest from the network: the slower of the transport and its
    /// assembly).
    #[arg(long, value_name = "IMAGES_PER_SEC")]
    pub target_rate: Option<f64>,
    /// About how many samples each stage measures (the first shards).
    #[arg(long, default_value_t = DEFAULT_DOCTOR_SAMPLES)]
    pub samples: u64,
    /// Each stage passes over those samples again until it has run this
    /// long.
    #[arg(long, default_value_t = DEFAULT_DOCTOR_SECONDS, value_name = "SECONDS")]
    pub seconds: f64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A stage that sends nothing for this many seconds fails.
    #[arg(long, default_value_t = stoker_client::DEFAULT_PROGRESS_TIMEOUT.as_secs())]
    pub progress_timeout: u64,
    #[command(flatten)]
    pub token: crate::TokenArgs,
    /// Ask this DNS server (IP:PORT) for dns:// workers.
    #[arg(long, value_name = "IP:PORT")]
    pub dns_server: Option<std::net::SocketAddr>,
}

#[derive(Debug, Serialize)]
struct StageJson {
    stage: &'static str,
    worker: Option<String>,
    samples: u64,
    bytes: u64,
    seconds: f64,
    images_per_sec: f64,
    bytes_per_sec: f64,
}

#[derive(Debug, Serialize)]
struct DiagnosisJson {
    stages: Vec<StageJson>,
    bottleneck: &'static str,
    summary: String,
    target_rate: f64,
    workers: usize,
    workers_for_target: u32,
    pack_report: Vec<String>,
}

fn stage_json(s: &StageRate) -> StageJson {
    StageJson {
        stage: s.stage.as_str(),
        worker: s.worker.clone(),
        samples: s.samples,
        bytes: s.bytes,
        seconds: s.seconds,
        images_per_sec: s.images_per_sec(),
        bytes_per_sec: s.bytes_per_sec(),
    }
}

fn to_json(d: &Diagnosis) -> DiagnosisJson {
    DiagnosisJson {
        stages: d.stages.iter().map(stage_json).collect(),
        bottleneck: d.bottleneck.as_str(),
        summary: d.summary.clone(),
        target_rate: d.target_rate,
        workers: d.workers,
        workers_for_target: d.workers_for_target,
        pack_report: d.pack_report.clone(),
    }
}

/// The table, the sentence and the fleet size, as the command prints them.
pub fn render(d: &Diagnosis) -> String {
    let mut out = format!(
        "{:<46} {:>10} {:>12} {:>8} {:>8}\n",
        "stage", "images/s", "bytes/s", "samples", "seconds"
    );
    for s in &d.stages {
        let what = match &s.worker {
            Some(w) => format!("{} ({w} alone)", s.stage.as_str()),
            None => match s.stage {
                stoker_client::doctor::Stage::Client => "client (assembly, upload if any)".to_owned(),
                stage => format!("{} ({} worker(s))", stage.as_str(), d.workers),
            },
        };
        out += &format!(
            "{what:<46} {:>10.0} {:>10}/s {:>8} {:>8.2}\n",
            s.images_per_sec(),
            human_bytes(s.bytes_per_sec()),
            s.samples,
            s.seconds
        );
    }
    out += &format!("\n{}.\n", capitalized(&d.summary));
    out += &format!(
        "{} worker(s) of the measured kind reach {:.0} images/s{}, if storage and the network keep up.\n",
        d.workers_for_target,
        d.target_rate,
        if d.workers_for_target as usize > d.workers {
            format!(" ({} now)", d.workers)
        } else {
            String::new()
        }
    );
    for line in &d.pack_report {
        out += &format!("Dataset: {line}.\n");
    }
    out
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.batch_size > 0, "--batch-size must be at least 1");
    anyhow::ensure!(args.samples > 0, "--samples must be at least 1");
    if let Some(r) = args.target_rate {
        anyhow::ensure!(
            r.is_finite() && r > 0.0,
            "--target-rate must be a positive rate, got {r}"
        );
    }
    let transform = args.transform.spec()?;
    let mut config = LoaderConfig::new(args.workers.clone(), args.dataset.clone(), args.batch_size, transform);
    config.device = args.device.target()?;
    args.format.apply(&mut config);
    config.token = args.token.secret()?;
    config.dns_server = args.dns_server;
    config.progress_timeout = std::time::Duration::from_secs(args.progress_timeout.max(1));
    let loader = Loader::connect(config).await?;
    anyhow::ensure!(
        args.seconds.is_finite() && args.seconds >= 0.0,
        "--seconds must be a non-negative number, got {}",
        args.seconds
    );
    let diagnosis = loader.doctor(args.samples, args.seconds, args.target_rate).await?;
    if args.json {
        println!("{}", serde_json::to_string(&to_json(&diagnosis))?);
    } else {
        print!("{}", render(&diagnosis));
    }
    Ok(())
}
