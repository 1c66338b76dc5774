//! MXNet RecordIO shards (`.rec`, usually with an `.idx` beside them), the
//! format of MXNet's `im2rec` and of SageMaker's image classification.
//!
//! A record is one or more parts, each
//!
//! ```text
//! u32 magic 0xced7230a | u32 lrec: cflag (3 high bits), length (29 low bits)
//! length bytes of data, zero-padded to a multiple of 4
//! ```
//!
//! `cflag` 0 is a whole record; 1, 2 and 3 are the first, a middle and the
//! last part of a record the writer split where its data held the magic
//! number at a 4-byte boundary. The magic is not stored there: joining the
//! parts puts it back.
//!
//! A record's data starts with MXNet's `IRHeader` (little-endian):
//!
//! ```text
//! u32 flag | f32 label | u64 id | u64 id2
//! ```
//!
//! When `flag` is above 0 the record is multi-label: `flag` f32 labels
//! follow the header and the header's own label is unused. The encoded
//! image is the rest. Labels are floats; a label that is not a whole number
//! is a label problem of that sample. The key is `<shard>:<index>`.
//!
//! Broken framing (a wrong magic, a part out of sequence) loses the record
//! boundaries: the rest of the shard is unreadable and the error says
//! where. A record too short for its header is a corrupt sample, skipped.
//!
//! [`RecordIoReader`] reads a shard; [`frame`] and [`image_record`] write
//! one, for `stoker pack`.

use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::error::{RecordError, RecordFormat};
use crate::image::sniff;
use crate::sample::{MemberProblem, RawSample, RawValue};
use crate::start::SampleStart;
use crate::stream::Counted;

/// The number every part starts with.
pub const MAGIC: u32 = 0xced7_230a;
/// Bytes of `IRHeader`.
pub const IR_HEADER: usize = 24;
/// The largest part a writer can frame (29 bits of length).
const MAX_PART: u32 = (1 << 29) - 1;

/// Frames `data` as one record the way MXNet's writer does: split
/// where the magic number sits at a 4-byte boundary, each part padded
/// to 4 bytes (the writer's side, for `stoker pack`).
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    let magic = MAGIC.to_le_bytes();
    let mut part_start = 0;
    let aligned = data.len() / 4 * 4;
    let mut i = 0;
    while i < aligned {
        if data[i..i + 4] == magic {
            let cflag = if part_start == 0 { 1u32 } else { 2 };
            push_part(&mut out, cflag, &data[part_start..i]);
            part_start = i + 4;
        }
        i += 4;
    }
    let cflag = if part_start == 0 { 0u32 } else { 3 };
    push_part(&mut out, cflag, &data[part_start..]);
    out
}

fn push_part(out: &mut Vec<u8>, cflag: u32, part: &[u8]) {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&((cflag << 29) | part.len() as u32).to_le_bytes());
    out.extend_from_slice(part);
    out.resize(out.len() + padding(part.len() as u64) as usize, 0);
}

/// A record's data as `im2rec` writes it: `IRHeader` (one label, the
/// image's id) then the encoded image.
pub fn image_record(label: f32, id: u64, image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IR_HEADER + image.len());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&label.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(image);
    out
}

fn padding(len: u64) -> u64 {
    (4 - len % 4) % 4
}

/// One record as read.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    Data {
        offset: u64,
        data: Bytes,
    },
    /// Longer than the limit: read past, not kept.
    TooLarge {
        size: u64,
    },
}

/// Reads MXNet RecordIO records from a stream, as samples.
#[derive(Debug)]
pub struct RecordIoReader<R> {
    stream: Counted<R>,
    shard: String,
    max_record_bytes: u64,
    label_offset: i64,
    /// Requested fields, each the header's whole label array.
    label_fields: usize,
    /// The position of the next sample.
    position: u64,
}

impl<R: AsyncRead + Unpin> RecordIoReader<R> {
    /// Reads `inner`, which starts at byte `offset` of the shard `shard`
    /// with the sample at `position` (both 0 for a whole shard). Records
    /// over `max_record_bytes` become skipped samples; `label_offset` is
    /// added to every label.
    pub fn new(inner: R, shard: &str, start: SampleStart, max_record_bytes: u64, label_offset: i64) -> Self {
        Self {
            stream: Counted::at(inner, start.offset, RecordFormat::RecordIo),
            shard: shard.to_owned(),
            max_record_bytes,
            label_offset,
            label_fields: 0,
            position: start.position,
        }
    }

    /// Delivers the header's whole label array (a multi-label record's
    /// every float, as written) as `fields` requested fields: RecordIO's
    /// only source of fields.
    pub fn with_label_fields(mut self, fields: usize) -> Self {
        self.label_fields = fields;
        self
    }

    /// Bytes of the shard consumed so far (from its beginning).
    pub fn offset(&self) -> u64 {
        self.stream.offset()
    }

    /// The next sample, or `None` at the end of the shard.
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, RecordError> {
        let Some(record) = self.next_record().await? else {
            return Ok(None);
        };
        let position = self.position;
        self.position += 1;
        let key = format!("{}:{position}", self.shard);
        let sample = match record {
            Record::Data { offset, data } => {
                sample_from_record(data, offset, key, position, self.label_offset, self.label_fields)
            }
            Record::TooLarge { size } => RawSample {
                key,
                position,
                image: Err(MemberProblem::TooLarge {
                    ext: "record".to_owned(),
                    size,
                    limit: self.max_record_bytes,
                }),
                label: Ok(-1),
                fields: Vec::new(),
            },
        };
        Ok(Some(sample))
    }

    /// The next record, its parts joined, or `None` at the end.
    async fn next_record(&mut self) -> Result<Option<Record>, RecordError> {
        let offset = self.stream.offset();
        let mut data: Vec<u8> = Vec::new();
        // Bytes of the record so far, kept or not.
        let mut size = 0u64;
        let mut first = true;
        loop {
            let part_offset = self.stream.offset();
            let mut header = [0u8; 8];
            if !self.stream.fill(&mut header, "record header", first).await? {
                return Ok(None);
            }
            let (magic, lrec) = header.split_at(4);
            let magic = u32::from_le_bytes(magic.try_into().unwrap_or_default());
            if magic != MAGIC {
                return Err(RecordError::Corrupt {
                    format: RecordFormat::RecordIo,
                    offset: part_offset,
                    reason: format!("expected the magic number {MAGIC:#010x}, found {magic:#010x}"),
                });
            }
            let lrec = u32::from_le_bytes(lrec.try_into().unwrap_or_default());
            let (cflag, len) = (lrec >> 29, u64::from(lrec & MAX_PART));
            match (first, cflag) {
                (true, 0 | 1) | (false, 2 | 3) => {}
                _ => {
                    return Err(RecordError::Corrupt {
                        format: RecordFormat::RecordIo,
                        offset: part_offset,
                        reason: format!(
                            "part flag {cflag} {}",
                            if first {
                                "continues a record that never began"
                            } else {
                                "starts a record before the last one ended"
                            }
                        ),
                    });
                }
            }
            first = false;
            size += len;
            if size <= self.max_record_bytes {
                let at = data.len();
                data.resize(at + len as usize, 0);
                self.stream.fill(&mut data[at..], "record data", false).await?;
            } else {
                data = Vec::new();
                self.stream.skip(len, "record data").await?;
            }
            self.stream.skip(padding(len), "record padding").await?;
            if cflag == 0 || cflag == 3 {
                break;
            }
            // The writer split the record where the magic number was.
            size += 4;
            if size <= self.max_record_bytes {
                data.extend_from_slice(&MAGIC.to_le_bytes());
            }
        }
        Ok(Some(if size > self.max_record_bytes {
            Record::TooLarge { size }
        } else {
            Record::Data {
                offset,
                data: Bytes::from(data),
            }
        }))
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().unwrap_or_default())
}

/// A float label as the integer class it names.
fn whole_label(label: f32, offset: i64) -> Result<i64, String> {
    if !label.is_finite() || label.fract() != 0.0 || label.abs() > 2f32.powi(53) {
        return Err(format!("label {label} is not a whole number"));
    }
    (label as i64)
        .checked_add(offset)
        .ok_or_else(|| format!("label {label} + offset {offset} overflows"))
}

/// One record's data (`IRHeader`, labels, image) as a sample.
fn sample_from_record(
    data: Bytes,
    offset: u64,
    key: String,
    position: u64,
    label_offset: i64,
    label_fields: usize,
) -> RawSample {
    let corrupt = |reason: String| MemberProblem::Corrupt { offset, reason };
    if data.len() < IR_HEADER {
        return RawSample {
            key,
            position,
            image: Err(corrupt(format!(
                "record of {} bytes is shorter than its {IR_HEADER}-byte header",
                data.len()
            ))),
            label: Ok(-1),
            fields: Vec::new(),
        };
    }
    let flag = le_u32(&data[0..4]) as usize;
    let (label, image_at) = if flag == 0 {
        (f32::from_le_bytes(data[4..8].try_into().unwrap_or_default()), IR_HEADER)
    } else {
        let image_at = flag.checked_mul(4).and_then(|n| n.checked_add(IR_HEADER));
        match image_at {
            Some(at) if at <= data.len() => (
                f32::from_le_bytes(data[IR_HEADER..IR_HEADER + 4].try_into().unwrap_or_default()),
                at,
            ),
            _ => {
                return RawSample {
                    key,
                    position,
                    image: Err(corrupt(format!(
                        "header says {flag} labels, more than the record's {} bytes hold",
                        data.len()
                    ))),
                    label: Ok(-1),
                    fields: Vec::new(),
                };
            }
        }
    };
    let image = data.slice(image_at..);
    let image = if image.is_empty() {
        Err(MemberProblem::Empty {
            ext: "image".to_owned(),
        })
    } else {
        match sniff(&image) {
            Some(kind) => Ok((kind, image)),
            None => Err(MemberProblem::NotImage {
                field: "record image".to_owned(),
            }),
        }
    };
    let labels: Vec<f64> = if flag == 0 {
        vec![f64::from(label)]
    } else {
        data[IR_HEADER..image_at]
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect()
    };
    RawSample {
        key,
        position,
        image,
        label: whole_label(label, label_offset),
        fields: vec![Ok(Some(RawValue::Floats(labels))); label_fields],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JPEG: &[u8] = &[0xff, 0xd8, 0xff, 0xe0, 0, 0x10];

    fn record(flag: u32, label: f32, labels: &[f32], image: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&flag.to_le_bytes());
        out.extend_from_slice(&label.to_le_bytes());
        out.extend_from_slice(&7u64.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        for l in labels {
            out.extend_from_slice(&l.to_le_bytes());
        }
        out.extend_from_slice(image);
        out
    }

    async fn read_all(bytes: &[u8], start: SampleStart, max: u64) -> (Vec<RawSample>, Option<RecordError>) {
        let mut reader = RecordIoReader::new(bytes, "train.rec", start, max, 0);
        let mut out = Vec::new();
        loop {
            match reader.next_sample().await {
                Ok(Some(s)) => out.push(s),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[tokio::test]
    async fn reads_labels_images_and_multi_label_records() {
        let mut shard = frame(&record(0, 3.0, &[], JPEG));
        shard.extend(frame(&record(2, 0.0, &[5.0, 9.0], JPEG)));
        shard.extend(frame(&record(0, 1.5, &[], JPEG)));
        let (samples, err) = read_all(&shard, SampleStart::default(), 1 << 20).await;
        assert_eq!(err, None);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].label, Ok(3));
        assert_eq!(samples[0].key, "train.rec:0");
        assert_eq!(samples[0].image.as_ref().unwrap().1.as_ref(), JPEG);
        assert_eq!(samples[1].label, Ok(5), "a multi-label record gives its first label");
        assert_eq!(samples[1].image.as_ref().unwrap().1.as_ref(), JPEG);
        assert!(samples[2].label.as_ref().unwrap_err().contains("1.5"));
    }

    #[tokio::test]
    async fn split_records_are_joined_with_the_magic_put_back() {
        // The magic at a 4-byte boundary of the data makes the writer split.
        let mut image = JPEG.to_vec();
        image.extend_from_slice(&[0, 0]);
        image.extend_from_slice(&MAGIC.to_le_bytes());
        image.extend_from_slice(&MAGIC.to_le_bytes());
        image.extend_from_slice(&[1, 2, 3]);
        let data = record(0, 4.0, &[], &image);
        let framed = frame(&data);
        assert!(framed.len() > data.len() + 16, "the record was split into parts");
        let (samples, err) = read_all(&framed, SampleStart::default(), 1 << 20).await;
        assert_eq!(err, None);
        assert_eq!(samples[0].image.as_ref().unwrap().1.as_ref(), &image[..]);
        // Over a limit the joined record is read past as a whole.
        let (samples, err) = read_all(&framed, SampleStart::default(), 30).await;
        assert_eq!(err, None);
        assert!(matches!(samples[0].image, Err(MemberProblem::TooLarge { .. })));
    }

    #[tokio::test]
    async fn a_reader_started_mid_shard_numbers_from_its_start() {
        let one = frame(&record(0, 1.0, &[], JPEG));
        let mut shard = one.clone();
        shard.extend(frame(&record(0, 2.0, &[], JPEG)));
        let start = SampleStart {
            position: 1,
            offset: one.len() as u64,
        };
        let (samples, err) = read_all(&shard[one.len()..], start, 1 << 20).await;
        assert_eq!(err, None);
        assert_eq!(samples.len(), 1);
        assert_eq!((samples[0].position, samples[0].label.clone()), (1, Ok(2)));
        assert_eq!(samples[0].key, "train.rec:1");
    }

    #[tokio::test]
    async fn the_fuzz_seeds_read_as_they_were_written() {
        let seed = include_bytes!("../fuzz/corpus/recordio_stream/records");
        let (samples, err) = read_all(&seed[1..], SampleStart::default(), 1 << 20).await;
        assert_eq!(err, None);
        assert_eq!(samples.len(), 2);
        assert_eq!((samples[0].label.clone(), samples[1].label.clone()), (Ok(3), Ok(1)));
        assert!(matches!(samples[0].image, Ok((crate::image::ImageKind::Jpeg, _))));
        assert!(matches!(samples[1].image, Ok((crate::image::ImageKind::Png, _))));
        let seed = include_bytes!("../fuzz/corpus/recordio_stream/split");
        let (samples, err) = read_all(&seed[1..], SampleStart::default(), 1 << 20).await;
        assert_eq!(err, None);
        let (_, image) = samples[0].image.as_ref().unwrap();
        assert_eq!(
            &image[4..8],
            MAGIC.to_le_bytes(),
            "the magic is put back between the parts"
        );
    }

    #[tokio::test]
    async fn bad_framing_and_short_records_say_where() {
        let good = frame(&record(0, 1.0, &[], JPEG));
        let mut shard = good.clone();
        shard.extend(frame(b"short"));
        shard.extend(frame(&record(0, 1.0, &[], b"not an image")));
        shard.extend(frame(&record(9, 1.0, &[], JPEG)));
        shard.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let (samples, err) = read_all(&shard, SampleStart::default(), 1 << 20).await;
        assert_eq!(samples.len(), 4);
        let offset = good.len() as u64;
        assert_eq!(
            samples[1].image,
            Err(MemberProblem::Corrupt {
                offset,
                reason: "record of 5 bytes is shorter than its 24-byte header".to_owned()
            })
        );
        assert!(matches!(samples[2].image, Err(MemberProblem::NotImage { .. })));
        assert!(matches!(&samples[3].image, Err(MemberProblem::Corrupt { reason, .. }) if reason.contains("9 labels")));
        let Some(RecordError::Corrupt {
            format: RecordFormat::RecordIo,
            offset,
            reason,
        }) = err
        else {
            panic!("expected a framing error, got {err:?}");
        };
        assert_eq!(offset, shard.len() as u64 - 8);
        assert!(reason.contains("magic"), "{reason}");
        // A cut inside a record is a truncation naming its offset.
        let (_, err) = read_all(&good[..good.len() - 3], SampleStart::default(), 1 << 20).await;
        assert!(matches!(err, Some(RecordError::Truncated { .. })), "{err:?}");
        // A continuation part without a first part.
        let mut orphan = MAGIC.to_le_bytes().to_vec();
        orphan.extend_from_slice(&(3u32 << 29).to_le_bytes());
        let (_, err) = read_all(&orphan, SampleStart::default(), 1 << 20).await;
        assert!(
            matches!(&err, Some(RecordError::Corrupt {
 format: RecordFormat::RecordIo, reason, .. }) if reason.contains("never began")),
            "{err:?}"
        );
    }
}
