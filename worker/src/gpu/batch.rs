//! A lane batch after its decode: every part of every sample (image, views,
//! masks) as a render into the batch's one output ([`BatchWork`]), the
//! steps of those that have any run in rounds over the batch first; then
//! each sample's result from what its parts made ([`results`]). A sample
//! whose part fails goes to the CPU path whole, with that part's reason.

use bytes::Bytes;
use stoker_core::{FieldValue, NpyArray, Step};
use stoker_cuda::handoff::DevicePixels;
use stoker_image::augment::Chain;

use super::device::Gpu;
use super::plan::{Part, Role, Work, fusable_tail};
use super::queue::{GpuResult, GpuSample};
use super::steps::GpuCrop;
use crate::outcome::Processed;
use stoker_cuda::DeviceImage;

/// Which image a render reads.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source {
    /// The decode of the batch's sample of this index.
    Decoded(usize),
    /// The step rounds' image of this index ([`BatchWork::made`]).
    Made(usize),
}

/// How a part is written into the batch's output.
pub(super) enum Render {
    /// A crop-resize (and flip) to `size` x `size`, read through `chain`.
    Crop {
        source: Source,
        chain: Chain,
        crop: GpuCrop,
        size: u32,
    },
    /// An image the step rounds finished, copied.
    Copy(usize),
    /// A mask (a byte a pixel) through its chain.
    Mask(Bytes, Chain),
}

/// A part of a sample: its index in the batch and in the sample's parts.
pub(super) type At = (usize, usize);

/// A part's pixels: copied to the host, or left on the device for a
/// loader in this process (`Recipe::on_device`; images alone).
#[derive(Clone, Debug)]
pub(super) enum PartPixels {
    Host(Bytes),
    Device(DevicePixels),
}

impl PartPixels {
    /// The host bytes; a part left on the device is an error here (views
    /// and masks always come to the host).
    fn host(self, what: &str) -> Result<Bytes, String> {
        match self {
            PartPixels::Host(bytes) => Ok(bytes),
            PartPixels::Device(_) => Err(format!("the gpu batch left a {what} on the device")),
        }
    }
}

/// What a part made: its size and its pixels.
pub(super) type Output = ((u32, u32), PartPixels);

/// A part's output, with the part.
pub(super) type Made = (At, (u32, u32), PartPixels);

/// A part whose steps run: the part, its steps, its output size.
type Stepped = (At, Vec<Step>, u32);

/// A batch's parts on their way to its output.
pub(super) struct BatchWork {
    /// Each sample's reason to go to the CPU path, once a part failed.
    pub(super) failed: Vec<Option<String>>,
    /// The decoded images, by sample (`None` where the decode failed, or
    /// where the sample's one stepped part took it).
    pub(super) decoded: Vec<Option<DeviceImage>>,
    /// The images the step rounds made.
    pub(super) made: Vec<DeviceImage>,
    /// Every part that is rendered into the output.
    pub(super) renders: Vec<(At, Render)>,
    /// Parts whose steps run first: the part, its own image, its steps
    /// and output size.
    stepped: Vec<(At, DeviceImage, Vec<Step>, u32)>,
}

impl BatchWork {
    pub(super) fn new(samples: usize) -> Self {
        Self {
            failed: vec![None; samples],
            decoded: (0..samples).map(|_| None).collect(),
            made: Vec::new(),
            renders: Vec::new(),
            stepped: Vec::new(),
        }
    }

    /// Sends sample `i` to the CPU path with `reason`, unless it has one.
    pub(super) fn fail(&mut self, i: usize, reason: String) {
        self.failed[i].get_or_insert(reason);
    }

    /// Sample `i`'s `parts` over its decoded `img`. A part with steps
    /// works on an image of its own: the decode itself when no other part
    /// reads it, else a device copy.
    pub(super) fn add(&mut self, gpu: &Gpu, i: usize, img: DeviceImage, parts: Vec<Part>) {
        let fused = parts.iter().any(|p| matches!(p.work, Work::Fused(..)));
        let mut stepped = parts.iter().filter(|p| matches!(p.work, Work::Steps(..))).count();
        let mut img = Some(img);
        for (k, part) in parts.into_iter().enumerate() {
            let render = match part.work {
                Work::Fused(chain, crop, size) => Render::Crop {
                    source: Source::Decoded(i),
                    chain,
                    crop,
                    size,
                },
                Work::Mask(pixels, chain) => Render::Mask(pixels, chain),
                Work::Steps(steps, size) => {
                    stepped -= 1;
                    let own = match img.take_if(|_| stepped == 0 && !fused) {
                        Some(own) => Ok(own),
                        None => img.as_ref().map_or_else(
                            || Err("no decoded image".to_owned()),
                            |src| gpu.copy_image(src).map_err(|e| e.to_string()),
                        ),
                    };
                    match own {
                        Ok(own) => self.stepped.push(((i, k), own, steps, size)),
                        Err(e) => self.fail(i, format!("gpu copy of the decode failed: {e}")),
                    }
                    continue;
                }
            };
            self.renders.push(((i, k), render));
        }
        self.decoded[i] = img;
    }

    /// Runs the stepped parts' steps, a round per step over the batch
    /// ([`Gpu::run_steps_batch`]); a tail of crop-resize to the output
    /// (and a horizontal flip) joins the fused kernel's launch.
    pub(super) fn run_steps(&mut self, gpu: &Gpu) {
        if self.stepped.is_empty() {
            return;
        }
        let (metas, images): (Vec<Stepped>, Vec<DeviceImage>) = std::mem::take(&mut self.stepped)
            .into_iter()
            .map(|(at, img, steps, size)| ((at, steps, size), img))
            .unzip();
        let tails: Vec<usize> = metas
            .iter()
            .map(|(_, steps, size)| fusable_tail(steps, *size))
            .collect();
        let prefixes: Vec<&[Step]> = metas
            .iter()
            .zip(&tails)
            .map(|((_, steps, _), &t)| &steps[..steps.len() - t])
            .collect();
        let results = gpu.run_steps_batch(images, &prefixes);
        drop(prefixes);
        for (((at, steps, size), tail), result) in metas.into_iter().zip(tails).zip(results) {
            // Each part on its own: one that fails sends its sample to the
            // CPU, which runs it or skips it with its own reason.
            let img = match result {
                Ok(img) => img,
                Err(e) => {
                    self.fail(at.0, format!("gpu steps failed: {e}"));
                    continue;
                }
            };
            let (w, h) = (img.width, img.height);
            let crop = (tail > 0)
                .then(|| GpuCrop::from_steps(&steps[steps.len() - tail..], w, h, size))
                .flatten();
            let render = match crop {
                Some(crop) => Render::Crop {
                    source: Source::Made(self.made.len()),
                    chain: Chain::new(w, h),
                    crop,
                    size,
                },
                None if tail == 0 && (w, h) == (size, size) => Render::Copy(self.made.len()),
                None => {
                    self.fail(at.0, format!("gpu steps made {w}x{h}, not {size}x{size}"));
                    continue;
                }
            };
            self.made.push(img);
            self.renders.push((at, render));
        }
    }

    /// The image `source` names, if it is there.
    pub(super) fn image(&self, source: Source) -> Option<&DeviceImage> {
        match source {
            Source::Decoded(i) => self.decoded.get(i)?.as_ref(),
            Source::Made(m) => self.made.get(m),
        }
    }

    /// The output size of `render`, and its bytes.
    pub(super) fn output(&self, render: &Render) -> ((u32, u32), usize) {
        let (w, h, channels) = match render {
            Render::Crop { size, .. } => (*size, *size, 3),
            Render::Copy(m) => self.made.get(*m).map_or((0, 0, 3), |img| (img.width, img.height, 3)),
            Render::Mask(_, chain) => (chain.out_w, chain.out_h, 1),
        };
        ((w, h), w as usize * h as usize * channels)
    }
}

/// A sample of the batch, with what its result is made of.
pub(super) struct Awaiting {
    pub(super) sample: GpuSample,
    /// Its parts' roles, in order.
    pub(super) roles: Vec<Role>,
    /// The request's fields, whose indices its masks take.
    pub(super) fields: usize,
}

/// Each sample's result, with its index in the batch: done, from the
/// outputs of its parts in `made` (part, size, pixels), or handed to the
/// CPU path with the reason in `failed`.
pub(super) fn results(samples: Vec<Awaiting>, failed: Vec<Option<String>>, made: Vec<Made>) -> Vec<(usize, GpuResult)> {
    let mut outputs: Vec<Vec<Option<Output>>> = samples.iter().map(|s| vec![None; s.roles.len()]).collect();
    for ((i, k), size, pixels) in made {
        if let Some(slot) = outputs.get_mut(i).and_then(|parts| parts.get_mut(k)) {
            *slot = Some((size, pixels));
        }
    }
    samples
        .into_iter()
        .zip(failed)
        .zip(outputs)
        .enumerate()
        .map(|(i, ((s, failed), parts))| {
            let back = |sample, reason| (i, GpuResult::Cpu { sample, reason });
            if let Some(reason) = failed {
                return back(s.sample, reason);
            }
            match processed(&s, parts) {
                Ok(p) => (i, GpuResult::Done(p)),
                Err(reason) => back(s.sample, reason),
            }
        })
        .collect()
}

/// `s`'s result from its parts' outputs: the image's pixels, its masks at
/// their indices of the request's fields, its views after them (the CPU
/// path's layout: `process_sample_with`).
fn processed(s: &Awaiting, parts: Vec<Option<Output>>) -> Result<Processed, String> {
    let mut image = None;
    let mut fields: Vec<Option<FieldValue>> = Vec::new();
    if s.roles.len() > 1 {
        fields.resize(s.fields, None);
    }
    for (role, part) in s.roles.iter().zip(parts) {
        let Some(((w, h), pixels)) = part else {
            return Err(format!("the gpu batch made no output for its {role:?}"));
        };
        match *role {
            Role::Image => image = Some((w, h, pixels)),
            Role::View(_) => fields.push(Some(FieldValue::Image(pixels.host("view")?))),
            Role::Mask(index) if index < s.fields => {
                fields[index] = Some(FieldValue::Array(NpyArray::mask(w, h, pixels.host("mask")?)));
            }
            Role::Mask(index) => return Err(format!("mask index {index} is past the {} fields", s.fields)),
        }
    }
    let (width, height, pixels) = image.ok_or("the gpu batch made no image")?;
    let (pixels, device) = match pixels {
        PartPixels::Host(bytes) => (bytes, None),
        PartPixels::Device(on_device) => (Bytes::new(), Some(on_device)),
    };
    Ok(Processed {
        key: s.sample.key.clone(),
        position: s.sample.position,
        label: s.sample.label,
        width,
        height,
        pixels,
        fields,
        device,
    })
}

#[cfg(test)]
mod tests {
    use stoker_core::{FieldValue, NpyArray};

    use super::*;

    fn sample(key: &str) -> GpuSample {
        GpuSample {
            key: key.to_owned(),
            position: 7,
            label: 3,
            data: Bytes::from_static(b"\xff\xd8"),
            plan: crate::gpu::queue::test_plan(),
            masks: Vec::new(),
            mask_pixels: Vec::new(),
        }
    }

    fn awaiting(key: &str, roles: Vec<Role>, fields: usize) -> Awaiting {
        Awaiting {
            sample: sample(key),
            roles,
            fields,
        }
    }

    fn bytes(n: usize, v: u8) -> Bytes {
        Bytes::from(vec![v; n])
    }

    fn host(n: usize, v: u8) -> PartPixels {
        PartPixels::Host(bytes(n, v))
    }

    /// The CPU path's layout (`process_sample_with`): masks at their
    /// indices of the request's fields, views after them, in order.
    #[test]
    fn a_samples_parts_land_where_the_cpu_path_puts_them() {
        let roles = vec![Role::Image, Role::View(0), Role::View(1), Role::Mask(1)];
        let made = vec![
            ((0, 3), (4, 4), host(16, 9)),
            ((0, 0), (4, 4), host(48, 1)),
            ((0, 2), (3, 3), host(27, 3)),
            ((0, 1), (2, 2), host(12, 2)),
        ];
        let out = results(vec![awaiting("k", roles, 3)], vec![None], made);
        let [(0, GpuResult::Done(p))] = &out[..] else {
            panic!("not done: {out:?}")
        };
        assert_eq!((p.key.as_str(), p.position, p.label), ("k", 7, 3));
        assert_eq!((p.width, p.height, p.pixels.clone()), (4, 4, bytes(48, 1)));
        assert_eq!(
            p.fields,
            vec![
                None,
                Some(FieldValue::Array(NpyArray::mask(4, 4, bytes(16, 9)))),
                None,
                Some(FieldValue::Image(bytes(12, 2))),
                Some(FieldValue::Image(bytes(27, 3))),
            ]
        );
        // An image alone has no fields: the item attaches what it read.
        let out = results(
            vec![awaiting("alone", vec![Role::Image], 2)],
            vec![None],
            vec![((0, 0), (2, 2), host(12, 5))],
        );
        assert!(matches!(&out[..], [(0, GpuResult::Done(p))] if p.fields.is_empty()));
    }

    #[test]
    fn a_failed_or_missing_part_sends_the_whole_sample_to_the_cpu() {
        let samples = vec![
            awaiting("failed", vec![Role::Image, Role::View(0)], 0),
            awaiting("missing", vec![Role::Image, Role::View(0)], 0),
            awaiting("past", vec![Role::Image, Role::Mask(2)], 2),
            awaiting("fine", vec![Role::Image], 0),
        ];
        let failed = vec![Some("gpu steps failed: no memory".to_owned()), None, None, None];
        let made = vec![
            ((0, 0), (2, 2), host(12, 0)),
            ((1, 0), (2, 2), host(12, 0)),
            ((2, 0), (2, 2), host(12, 0)),
            ((2, 1), (2, 2), host(4, 0)),
            ((3, 0), (2, 2), host(12, 0)),
        ];
        let mut out = results(samples, failed, made);
        out.sort_by_key(|(i, _)| *i);
        let reasons: Vec<String> = out
            .into_iter()
            .map(|(_, r)| match r {
                GpuResult::Cpu { sample, reason } => format!("{}: {reason}", sample.key),
                GpuResult::Done(p) => format!("{}: done", p.key),
                GpuResult::Skipped(s) => format!("{}: skipped", s.key),
            })
            .collect();
        assert_eq!(
            reasons,
            [
                "failed: gpu steps failed: no memory",
                "missing: the gpu batch made no output for its View(0)",
                "past: mask index 2 is past the 2 fields",
                "fine: done",
            ]
        );
    }
}
