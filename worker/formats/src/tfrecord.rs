//! TFRecord shards: length-delimited records holding `tf.train.Example`s.
//!
//! Each record is
//!
//! ```text
//! u64 length (little-endian) | u32 masked CRC32C of the length
//! length bytes of data       | u32 masked CRC32C of the data
//! ```
//!
//! Both checksums are verified. A bad length checksum means the framing is
//! lost: the rest of the shard is unreadable and the error says where. A bad
//! data checksum (the length being sound) spoils that record alone: it
//! becomes a skipped sample naming its offset, and reading goes on.
//!
//! The data of a record is a `tf.train.Example`, decoded with prost from
//! the few messages of TensorFlow's `example.proto` and `feature.proto` that
//! it needs. The image is the first value of a bytes feature (by default
//! `image/encoded`, the layout of TensorFlow's ImageNet shards), the label
//! the first value of an int64 feature (`image/class/label`) plus an
//! offset (TensorFlow's ImageNet labels start at 1), and the key the
//! `image/filename` feature when there is one, else `<shard>:<index>`.
//!
//! [`ExampleReader`] reads a shard; [`frame`] writes a record, for `stoker
//! pack`.

use std::collections::HashMap;

use bytes::Bytes;
use prost::Message;
use tokio::io::AsyncRead;

use crate::error::{RecordError, RecordFormat};
use crate::image::sniff;
use crate::sample::{MemberProblem, RawField, RawSample, RawValue};
use crate::start::SampleStart;
use crate::stream::Counted;

/// Bytes of a record's header: the length and its checksum.
const HEADER: usize = 12;

/// TFRecord's checksum: CRC32C, rotated and offset so that a checksum of
/// data holding checksums stays well distributed.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Frames `data` as one record (the writer's side, for `stoker pack`).
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// One record as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// A record whose checksums match.
    Data { offset: u64, data: Bytes },
    /// A record longer than the limit: read past, not kept.
    TooLarge { offset: u64, size: u64 },
    /// A record whose data does not match its checksum.
    Corrupt { offset: u64, reason: String },
}

/// Reads records from a stream, one at a time.
#[derive(Debug)]
pub struct RecordReader<R> {
    stream: Counted<R>,
    max_record_bytes: u64,
}

impl<R: AsyncRead + Unpin> RecordReader<R> {
    pub fn new(inner: R, max_record_bytes: u64) -> Self {
        Self::at(inner, max_record_bytes, 0)
    }

    /// A reader of a stream that starts at byte `offset` of the shard.
    fn at(inner: R, max_record_bytes: u64, offset: u64) -> Self {
        Self {
            stream: Counted::at(inner, offset, RecordFormat::TfRecord),
            max_record_bytes,
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.stream.offset()
    }

    async fn fill(&mut self, buf: &mut [u8], what: &'static str, eof_ok: bool) -> Result<bool, RecordError> {
        self.stream.fill(buf, what, eof_ok).await
    }

    async fn skip(&mut self, n: u64, what: &'static str) -> Result<(), RecordError> {
        self.stream.skip(n, what).await
    }

    /// The next record, or `None` at the end of the shard.
    pub async fn next_record(&mut self) -> Result<Option<Record>, RecordError> {
        let offset = self.stream.offset();
        let mut header = [0u8; HEADER];
        if !self.fill(&mut header, "record length", true).await? {
            return Ok(None);
        }
        let (len_bytes, len_crc) = header.split_at(8);
        let expected = u32::from_le_bytes(len_crc.try_into().unwrap_or_default());
        if masked_crc32c(len_bytes) != expected {
            return Err(RecordError::Corrupt {
                format: RecordFormat::TfRecord,
                offset,
                reason: "the record length's checksum does not match".to_owned(),
            });
        }
        let size = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default());
        if size > self.max_record_bytes {
            // The length is sound (its checksum matched): step over it.
            self.skip(size, "record data").await?;
            self.skip(4, "record checksum").await?;
            return Ok(Some(Record::TooLarge { offset, size }));
        }
        let mut data = vec![0u8; size as usize];
        self.fill(&mut data, "record data", false).await?;
        let mut crc = [0u8; 4];
        self.fill(&mut crc, "record checksum", false).await?;
        if masked_crc32c(&data) != u32::from_le_bytes(crc) {
            return Ok(Some(Record::Corrupt {
                offset,
                reason: "the data's checksum does not match".to_owned(),
            }));
        }
        Ok(Some(Record::Data {
            offset,
            data: Bytes::from(data),
        }))
    }
}

/// `tf.train.Example`, and the messages it holds, as TensorFlow's
/// `example.proto` and `feature.proto` define them (field numbers and
/// types); `FloatList` is read past.
pub mod proto {
    use std::collections::HashMap;

    use bytes::Bytes;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Example {
        #[prost(message, optional, tag = "1")]
        pub features: Option<Features>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Features {
        #[prost(map = "string, message", tag = "1")]
        pub feature: HashMap<String, Feature>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Feature {
        #[prost(oneof = "Kind", tags = "1, 2, 3")]
        pub kind: Option<Kind>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(message, tag = "1")]
        BytesList(BytesList),
        #[prost(message, tag = "2")]
        FloatList(FloatList),
        #[prost(message, tag = "3")]
        Int64List(Int64List),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BytesList {
        #[prost(bytes = "bytes", repeated, tag = "1")]
        pub value: Vec<Bytes>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FloatList {
        #[prost(float, repeated, tag = "1")]
        pub value: Vec<f32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Int64List {
        #[prost(int64, repeated, tag = "1")]
        pub value: Vec<i64>,
    }
}

/// Which features of an Example are the image, the label and the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExampleFields {
    /// A bytes feature: the encoded image (its first value).
    pub image: String,
    /// An int64 feature: the label (its first value). A sample without it
    /// is unlabelled (-1).
    pub label: String,
    /// Added to every label read (-1 for TensorFlow's 1-based ImageNet).
    pub label_offset: i64,
    /// A bytes feature naming the sample: its key when present.
    pub key: String,
    /// Other features to deliver whole, as [`RawSample::fields`] in this
    /// order (a caption, a multi-label's int64 list, a box's floats).
    pub extra: Vec<String>,
}

/// Reads Examples from a TFRecord shard as samples.
#[derive(Debug)]
pub struct ExampleReader<R> {
    records: RecordReader<R>,
    fields: ExampleFields,
    /// The shard's name, for the keys of samples without one.
    shard: String,
    returned: u64,
}

impl<R: AsyncRead + Unpin> ExampleReader<R> {
    /// Reads `inner`, which starts at `start` of the shard `shard` (the
    /// default for a whole shard).
    pub fn new(inner: R, shard: &str, fields: ExampleFields, max_record_bytes: u64, start: SampleStart) -> Self {
        Self {
            records: RecordReader::at(inner, max_record_bytes, start.offset),
            fields,
            shard: shard.to_owned(),
            returned: start.position,
        }
    }

    pub fn offset(&self) -> u64 {
        self.records.offset()
    }

    /// The next sample, or `None` at the end of the shard. A record that
    /// cannot be used (bad checksum, over the size limit, not an Example)
    /// is a sample whose image is the problem, so that it is skipped with
    /// its reason.
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, RecordError> {
        let Some(record) = self.records.next_record().await? else {
            return Ok(None);
        };
        let position = self.returned;
        self.returned += 1;
        let fallback_key = || format!("{}:{position}", self.shard);
        let sample = match record {
            Record::Data { offset, data } => sample_from_example(data, offset, position, &self.fields, fallback_key),
            Record::TooLarge { size, .. } => RawSample {
                key: fallback_key(),
                position,
                image: Err(MemberProblem::TooLarge {
                    ext: "record".to_owned(),
                    size,
                    limit: self.records.max_record_bytes,
                }),
                label: Ok(-1),
                fields: Vec::new(),
            },
            Record::Corrupt { offset, reason } => RawSample {
                key: fallback_key(),
                position,
                image: Err(MemberProblem::Corrupt { offset, reason }),
                label: Ok(-1),
                fields: Vec::new(),
            },
        };
        Ok(Some(sample))
    }
}

fn first_bytes(features: &HashMap<String, proto::Feature>, name: &str) -> Option<Bytes> {
    match features.get(name)?.kind.as_ref()? {
        proto::Kind::BytesList(list) => list.value.first().cloned(),
        _ => None,
    }
}

/// One Example's record as a sample.
fn sample_from_example(
    data: Bytes,
    offset: u64,
    position: u64,
    fields: &ExampleFields,
    fallback_key: impl FnOnce() -> String,
) -> RawSample {
    let example = match proto::Example::decode(data) {
        Ok(e) => e,
        Err(e) => {
            return RawSample {
                key: fallback_key(),
                position,
                image: Err(MemberProblem::Corrupt {
                    offset,
                    reason: format!("not a tf.train.Example: {e}"),
                }),
                label: Ok(-1),
                fields: Vec::new(),
            };
        }
    };
    let features = example.features.map(|f| f.feature).unwrap_or_default();
    let key = first_bytes(&features, &fields.key)
        .and_then(|k| String::from_utf8(k.to_vec()).ok())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(fallback_key);
    let image = match features.get(&fields.image).and_then(|f| f.kind.as_ref()) {
        Some(proto::Kind::BytesList(list)) => match list.value.first() {
            Some(bytes) if bytes.is_empty() => Err(MemberProblem::Empty {
                ext: fields.image.clone(),
            }),
            Some(bytes) => match sniff(bytes) {
                Some(kind) => Ok((kind, bytes.clone())),
                None => Err(MemberProblem::NotImage {
                    field: fields.image.clone(),
                }),
            },
            None => Err(MemberProblem::Empty {
                ext: fields.image.clone(),
            }),
        },
        Some(_) => Err(MemberProblem::NotImage {
            field: format!("{} (not a bytes feature)", fields.image),
        }),
        None => Err(MemberProblem::MissingField {
            field: fields.image.clone(),
        }),
    };
    let label = match features.get(&fields.label).and_then(|f| f.kind.as_ref()) {
        None => Ok(-1),
        Some(proto::Kind::Int64List(list)) => match list.value.first() {
            Some(&v) => v
                .checked_add(fields.label_offset)
                .ok_or_else(|| format!("label {v} + offset {} overflows", fields.label_offset)),
            None => Err(format!("{} feature holds no value", fields.label)),
        },
        Some(_) => Err(format!("{} feature is not an int64 list", fields.label)),
    };
    let fields = fields.extra.iter().map(|name| feature_value(&features, name)).collect();
    RawSample {
        key,
        position,
        image,
        label,
        fields,
    }
}

/// A feature's values as stored: an int64 or float list whole, a bytes
/// list of one value as those bytes, of several as the list. A feature
/// present without a kind (an empty `Feature`) is missing.
fn feature_value(features: &HashMap<String, proto::Feature>, name: &str) -> RawField {
    let value = match features.get(name).and_then(|f| f.kind.as_ref()) {
        None => None,
        Some(proto::Kind::Int64List(list)) => Some(RawValue::Ints(list.value.clone())),
        Some(proto::Kind::FloatList(list)) => {
            Some(RawValue::Floats(list.value.iter().map(|&v| f64::from(v)).collect()))
        }
        Some(proto::Kind::BytesList(list)) => match list.value.as_slice() {
            [one] => Some(RawValue::Bytes(one.clone())),
            many => Some(RawValue::BytesList(many.to_vec())),
        },
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JPEG: &[u8] = &[0xff, 0xd8, 0xff, 0xe0, 0, 0x10];
    const DEFAULT_IMAGE_FEATURE: &str = "image/encoded";
    const DEFAULT_LABEL_FEATURE: &str = "image/class/label";
    const DEFAULT_KEY_FEATURE: &str = "image/filename";

    /// TensorFlow's ImageNet layout.
    fn imagenet() -> ExampleFields {
        ExampleFields {
            image: DEFAULT_IMAGE_FEATURE.to_owned(),
            label: DEFAULT_LABEL_FEATURE.to_owned(),
            label_offset: 0,
            key: DEFAULT_KEY_FEATURE.to_owned(),
            extra: Vec::new(),
        }
    }

    fn example(image: Option<&[u8]>, label: Option<i64>, name: Option<&str>) -> Vec<u8> {
        let mut feature = HashMap::new();
        if let Some(image) = image {
            feature.insert(
                DEFAULT_IMAGE_FEATURE.to_owned(),
                proto::Feature {
                    kind: Some(proto::Kind::BytesList(proto::BytesList {
                        value: vec![Bytes::copy_from_slice(image)],
                    })),
                },
            );
        }
        if let Some(label) = label {
            feature.insert(
                DEFAULT_LABEL_FEATURE.to_owned(),
                proto::Feature {
                    kind: Some(proto::Kind::Int64List(proto::Int64List { value: vec![label] })),
                },
            );
        }
        if let Some(name) = name {
            feature.insert(
                DEFAULT_KEY_FEATURE.to_owned(),
                proto::Feature {
                    kind: Some(proto::Kind::BytesList(proto::BytesList {
                        value: vec![Bytes::copy_from_slice(name.as_bytes())],
                    })),
                },
            );
        }
        proto::Example {
            features: Some(proto::Features { feature }),
        }
        .encode_to_vec()
    }

    async fn read_all(bytes: Vec<u8>, fields: ExampleFields) -> (Vec<RawSample>, Option<RecordError>) {
        let mut reader = ExampleReader::new(
            &bytes[..],
            "train-00000-of-00001",
            fields,
            1 << 20,
            SampleStart::default(),
        );
        let mut out = Vec::new();
        loop {
            match reader.next_sample().await {
                Ok(Some(s)) => out.push(s),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    /// The fuzz seeds are framed by make_corpus.py with a CRC32C of its
    /// own: this reader agrees with it.
    #[tokio::test]
    async fn the_fuzz_seeds_read_as_they_were_written() {
        let seed = include_bytes!("../fuzz/corpus/tfrecord_stream/examples");
        let (samples, err) = read_all(seed[1..].to_vec(), imagenet()).await;
        assert_eq!(err, None);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].key, "n0/a.JPEG");
        assert_eq!(samples[0].label, Ok(3));
        assert!(matches!(samples[0].image, Ok((crate::image::ImageKind::Jpeg, _))));
        assert!(matches!(samples[1].image, Ok((crate::image::ImageKind::Png, _))));
        assert!(matches!(samples[2].image, Err(MemberProblem::NotImage { .. })));
        let seed = include_bytes!("../fuzz/corpus/tfrecord_stream/bad_data_checksum");
        let (samples, _) = read_all(seed[1..].to_vec(), imagenet()).await;
        assert!(matches!(
            samples[0].image,
            Err(MemberProblem::Corrupt { offset: 0, .. })
        ));
        assert!(samples[1].image.is_ok());
    }

    #[test]
    fn the_checksum_is_tensorflows() {
        // crc32c("123456789") is 0xe3069283 (RFC 3720's check value);
        // masked as TensorFlow's crc32c::Mask does.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            masked_crc32c(b"123456789"),
            0xe306_9283_u32.rotate_right(15).wrapping_add(0xa282_ead8)
        );
    }

    #[tokio::test]
    async fn examples_become_samples_with_keys_labels_and_offsets() {
        let mut shard = frame(&example(Some(JPEG), Some(3), Some("n01440764_10026.JPEG")));
        shard.extend(frame(&example(Some(JPEG), Some(1), None)));
        shard.extend(frame(&example(Some(JPEG), None, None)));
        let fields = ExampleFields {
            label_offset: -1,
            ..imagenet()
        };
        let (samples, err) = read_all(shard, fields).await;
        assert_eq!(err, None);
        let got: Vec<_> = samples
            .iter()
            .map(|s| (s.key.as_str(), s.position, s.label.clone(), s.image.is_ok()))
            .collect();
        assert_eq!(
            got,
            [
                ("n01440764_10026.JPEG", 0, Ok(2), true),
                ("train-00000-of-00001:1", 1, Ok(0), true),
                // Unlabelled: -1, not shifted.
                ("train-00000-of-00001:2", 2, Ok(-1), true),
            ]
        );
    }

    #[tokio::test]
    async fn a_bad_data_checksum_skips_one_record_and_reading_goes_on() {
        let first = frame(&example(Some(JPEG), Some(1), Some("a")));
        let mut second = frame(&example(Some(JPEG), Some(2), Some("b")));
        let at = first.len() as u64;
        let n = second.len();
        second[n - 6] ^= 0x40; // a data byte
        let third = frame(&example(Some(JPEG), Some(3), Some("c")));
        let shard = [first, second, third].concat();
        let (samples, err) = read_all(shard, imagenet()).await;
        assert_eq!(err, None);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].key, "a");
        assert_eq!(
            samples[1].image,
            Err(MemberProblem::Corrupt {
                offset: at,
                reason: "the data's checksum does not match".to_owned()
            })
        );
        assert_eq!(samples[1].key, "train-00000-of-00001:1");
        assert_eq!(samples[2].key, "c");
    }

    #[tokio::test]
    async fn a_bad_length_checksum_or_a_cut_ends_the_shard_saying_where() {
        let first = frame(&example(Some(JPEG), Some(1), Some("a")));
        let mut second = frame(&example(Some(JPEG), Some(2), Some("b")));
        second[9] ^= 1; // the length's checksum
        let at = first.len() as u64;
        let (samples, err) = read_all([first.clone(), second].concat(), imagenet()).await;
        assert_eq!(samples.len(), 1);
        assert!(
            matches!(err, Some(RecordError::Corrupt {
 format: RecordFormat::TfRecord, offset, .. }) if offset == at),
            "{err:?}"
        );

        let whole = frame(&example(Some(JPEG), Some(2), Some("b")));
        let cut = [first, whole[..whole.len() - 3].to_vec()].concat();
        let (samples, err) = read_all(cut, imagenet()).await;
        assert_eq!(samples.len(), 1);
        assert!(
            matches!(
                err,
                Some(RecordError::Truncated {
                    format: RecordFormat::TfRecord,
                    what: "record checksum",
                    ..
                })
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn records_without_a_usable_image_say_why() {
        let mut shard = frame(&example(None, Some(1), Some("no-image")));
        shard.extend(frame(&example(Some(b"hello, not an image"), Some(1), Some("text"))));
        shard.extend(frame(&example(Some(b""), Some(1), Some("empty"))));
        shard.extend(frame(b"\xff\xff\xff not protobuf"));
        shard.extend(frame(&vec![0u8; 2 << 20]));
        let (samples, err) = read_all(shard, imagenet()).await;
        assert_eq!(err, None);
        let problems: Vec<String> = samples
            .iter()
            .map(|s| s.image.as_ref().map(|_| ()).unwrap_err().to_string())
            .collect();
        assert_eq!(problems[0], "no image/encoded feature");
        assert_eq!(problems[1], "image/encoded is not a JPEG or PNG image");
        assert_eq!(problems[2], "image/encoded member is empty");
        assert!(problems[3].contains("not a tf.train.Example"), "{}", problems[3]);
        assert!(problems[4].contains("exceeds the member size limit"), "{}", problems[4]);
    }

    #[tokio::test]
    async fn other_feature_names_and_a_wrong_label_type() {
        let mut feature = HashMap::new();
        feature.insert(
            "jpeg".to_owned(),
            proto::Feature {
                kind: Some(proto::Kind::BytesList(proto::BytesList {
                    value: vec![Bytes::from_static(JPEG)],
                })),
            },
        );
        feature.insert(
            "class".to_owned(),
            proto::Feature {
                kind: Some(proto::Kind::FloatList(proto::FloatList { value: vec![1.0] })),
            },
        );
        let data = proto::Example {
            features: Some(proto::Features { feature }),
        }
        .encode_to_vec();
        let fields = ExampleFields {
            image: "jpeg".to_owned(),
            label: "class".to_owned(),
            ..imagenet()
        };
        let (samples, _) = read_all(frame(&data), fields).await;
        assert!(samples[0].image.is_ok());
        assert_eq!(samples[0].label, Err("class feature is not an int64 list".to_owned()));
    }
}
