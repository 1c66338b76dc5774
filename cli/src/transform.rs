//! `--transform` and `--image-size`, shared by every command that runs a
//! transform, and `stoker augment`: one image through a spec, from the
//! shell.

use std::path::PathBuf;

use anyhow::Context;
use stoker_core::{SampleRng, TransformSpec};
use stoker_image::decode::{ImageKind, RgbImage, sniff};

/// What the worker does to each image.
#[derive(Debug, Clone, clap::Args)]
pub struct TransformArgs {
    // Its help is TRANSFORM_HELP; `--help` adds the ops.
    #[arg(long, default_value = "train", help = TRANSFORM_HELP, long_help = transform_long_help())]
    pub transform: String,
    /// Output images are SIZE x SIZE (presets; 224 when not given). With a
    /// JSON spec the size is where its ops end, and this must match it.
    #[arg(long)]
    pub image_size: Option<u32>,
}

/// `--transform`'s help.
const TRANSFORM_HELP: &str = "`train` (RandomResizedCrop + flip), `eval` (resize + center crop), a JSON spec \
     (`{\"ops\": [{\"op\": \"RandomResizedCrop\", \"size\": 224}, ...]}`, torchvision's op and argument names; \
     Python's `stoker.transforms` writes it with `.to_json()`), or a file holding one (`FILE.json`).";

/// `--transform`'s long help: the help, then the ops from the op schema.
fn transform_long_help() -> String {
    format!(
        "{TRANSFORM_HELP}\n\nOps: {}.\n`stoker transforms` lists their arguments and defaults.",
        stoker_core::transform::OP_NAMES.join(", ")
    )
}

impl TransformArgs {
    /// The validated spec.
    pub fn spec(&self) -> anyhow::Result<TransformSpec> {
        let arg = self.transform.trim();
        let text = if !arg.starts_with('{') && (arg.ends_with(".json") || std::path::Path::new(arg).is_file()) {
            std::fs::read_to_string(arg).with_context(|| format!("cannot read the transform spec {arg}"))?
        } else {
            arg.to_owned()
        };
        TransformSpec::parse(&text, self.image_size).with_context(|| {
            if text.trim_start().starts_with('{') {
                "invalid --transform spec".to_owned()
            } else {
                format!("invalid --transform {arg:?} or --image-size")
            }
        })
    }
}

/// `stoker augment`: decode one image and run a transform spec on it, as a
/// worker would for the sample at (seed, epoch, shard, position), writing
/// the result as PNG.
#[derive(Debug, clap::Args)]
pub struct AugmentArgs {
    #[command(flatten)]
    pub transform: TransformArgs,
    /// A JPEG or PNG image.
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the result, RGB, 8 bits, in the format its extension
    /// names: .png (lossless), or .jpg / .jpeg (JPEG, quality 95).
    #[arg(long)]
    pub output: PathBuf,
    /// Seed of the sample's random draws (as the loader's --seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Epoch the draws are made for.
    #[arg(long, default_value_t = 0)]
    pub epoch: u64,
    /// The shard name the sample's randomness is drawn for.
    #[arg(long, default_value = "augment")]
    pub shard: String,
    /// The sample's position in its shard.
    #[arg(long, default_value_t = 0)]
    pub position: u64,
    /// Images with more pixels than this are refused before decoding.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_image_pixels: u64,
}

/// The formats `augment` writes, by the output's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputFormat {
    Png,
    Jpeg,
}

impl OutputFormat {
    fn of(path: &std::path::Path) -> anyhow::Result<Self> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match ext.as_str() {
            "png" => Ok(Self::Png),
            "jpg" | "jpeg" => Ok(Self::Jpeg),
            _ => anyhow::bail!(
                "cannot tell the format to write {} in from its extension: use .png or .jpg",
                path.display()
            ),
        }
    }
}

pub fn run_augment(args: AugmentArgs) -> anyhow::Result<()> {
    // Checked before any work: the output's format.
    let format = OutputFormat::of(&args.output)?;
    let spec = args.transform.spec()?;
    let data = std::fs::read(&args.input).with_context(|| format!("cannot read {}", args.input.display()))?;
    let kind = sniff(&data).unwrap_or(ImageKind::Jpeg);
    let rng = SampleRng::for_sample(args.seed, args.epoch, &args.shard, args.position);
    // The draws this sample's pipeline makes at the decoded size: the
    // steps it resolves to, as the worker resolves them.
    let decoded = stoker_image::decode::decode(kind, &data, args.max_image_pixels)
        .with_context(|| format!("cannot decode {}", args.input.display()))?;
    let steps = stoker_core::resolve_steps(&spec, &rng, decoded.width, decoded.height)
        .with_context(|| format!("cannot resolve the transform for {}", args.input.display()))?;
    println!(
        "draws for seed {} epoch {} shard {:?} position {} at {}x{}:",
        args.seed, args.epoch, args.shard, args.position, decoded.width, decoded.height
    );
    for (i, step) in steps.iter().enumerate() {
        println!("  step {i}: {step:?}");
    }
    drop(decoded);
    let mut augmenter = stoker_image::augment::Augmenter::new();
    let out = stoker_image::decode_and_transform(&mut augmenter, kind, &data, &spec, &rng, args.max_image_pixels)
        .with_context(|| format!("cannot transform {}", args.input.display()))?;
    let bytes = match format {
        OutputFormat::Png => encode_png(&out, &args.output)?,
        OutputFormat::Jpeg => stoker_synth::encode_jpeg(&out, 95)
            .map_err(|e| anyhow::anyhow!("cannot encode {}: {e}", args.output.display()))?,
    };
    std::fs::write(&args.output, bytes).with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!(
        "wrote {} ({}x{}, {})",
        args.output.display(),
        out.width,
        out.height,
        if format == OutputFormat::Png {
            "png"
        } else {
            "jpeg, quality 95"
        }
    );
    Ok(())
}

fn encode_png(img: &RgbImage, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use zune_core::bit_depth::BitDepth;
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::EncoderOptions;
    let options = EncoderOptions::new(
        img.width as usize,
        img.height as usize,
        ColorSpace::RGB,
        BitDepth::Eight,
    );
    let mut png = Vec::new();
    zune_png::PngEncoder::new(&img.pixels, options)
        .encode(&mut png)
        .map_err(|e| anyhow::anyhow!("cannot encode {}: {e:?}", path.display()))?;
    Ok(png)
}

/// `stoker transforms`: the op schema, as a list or as JSON.
#[derive(Debug, clap::Args)]
pub struct TransformsArgs {
    /// Only this op (its name as in a spec, e.g. RandomResizedCrop).
    pub op: Option<String>,
    /// The schema as JSON: each op's name, doc, origin, role and arguments
    /// (name, kind, required, default, doc).
    #[arg(long)]
    pub json: bool,
}

/// Prints the schema of every op, or of `args.op`.
pub fn run_transforms(args: &TransformsArgs) -> anyhow::Result<()> {
    use stoker_core::transform::OP_SCHEMAS;
    use stoker_core::transform::catalog::{python_repr, schema_json, signature};

    let wanted = |name: &str| args.op.as_deref().is_none_or(|op| op == name);
    if let Some(op) = &args.op
        && !OP_SCHEMAS.iter().any(|(name, _)| name == op)
    {
        anyhow::bail!(
            "unknown transform op {op:?}; the ops are: {}",
            stoker_core::transform::OP_NAMES.join(", ")
        );
    }
    if args.json {
        let all = schema_json();
        let ops: Vec<&serde_json::Value> = all
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["name"].as_str().is_some_and(wanted))
            .collect();
        println!("{}", serde_json::to_string_pretty(&ops)?);
        return Ok(());
    }
    for (name, s) in OP_SCHEMAS.iter().filter(|(name, _)| wanted(name)) {
        println!("{}\n    {} ({})", signature(name, s), s.doc, s.role.name());
        for a in s.args {
            let default = a
                .default_value()
                .map_or_else(|| "required".to_owned(), |d| format!("default {}", python_repr(&d)));
            println!("    {:<20} {}; {}: {}", a.name, a.kind.accepts(), default, a.doc);
        }
    }
    Ok(())
}
