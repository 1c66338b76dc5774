//! WebDataset shards: the members of a tar ([`crate::tar`]) grouped into
//! samples.
//!
//! Members are grouped the way the Python `webdataset` library groups them:
//! the key is the member path up to the first dot of the file name, the
//! extension is the rest; consecutive members with the same key form one
//! sample. Images come from `jpg`, `jpeg` or `png`, the label from `cls`;
//! other members are ignored.
//!
//! Only the members a sample uses are read into memory: its first image
//! (`jpg`, `jpeg`, `png`) and its label (`cls`, at most
//! [`MAX_LABEL_BYTES`]); the rest is read past. Before it reads an image,
//! [`SampleReader::next_sample_within`] asks its caller, with the member's
//! size, whether it may: that is where the worker reserves the bytes in its
//! memory budget (this crate knows nothing of budgets).
//!
//! The grouping is fuzzed with the tar reader over whole streams
//! (`fuzz/fuzz_targets/tar_stream.rs`).

use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::error::{RecordError, RecordFormat};
use crate::image::ImageKind;
use crate::sample::{MemberProblem, RawField, RawSample, RawValue, ReadStep};
use crate::start::SampleStart;
use crate::tar::{Member, TarReader};

/// The largest `cls` member read: a label is an integer, so anything
/// longer is a label error, read past without being held.
pub const MAX_LABEL_BYTES: u64 = 4096;

/// Splits a member path into (key, extension) the way `webdataset` does:
/// the key runs to the first dot of the file name. Names without a dot in
/// the file name have no extension and are ignored.
pub fn split_key(path: &str) -> Option<(&str, &str)> {
    let file_start = path.rfind('/').map_or(0, |i| i + 1);
    let dot = path[file_start..].find('.')? + file_start;
    if dot == file_start {
        // ".hidden" files: webdataset's regex needs a non-empty stem.
        return None;
    }
    Some((&path[..dot], &path[dot + 1..]))
}

#[derive(Debug, Default)]
struct Group {
    key: String,
    image: Option<(ImageKind, Bytes)>,
    problem: Option<MemberProblem>,
    label: Option<Result<i64, String>>,
    /// The requested fields' members, in the order asked.
    fields: Vec<RawField>,
}

impl Group {
    /// A member's bytes as the requested fields at `indices`.
    fn set_fields(&mut self, indices: &[usize], data: &Bytes) {
        for &i in indices {
            self.fields[i] = Ok(Some(RawValue::Bytes(data.clone())));
        }
    }

    fn finish(self, position: u64) -> RawSample {
        let image = match (self.image, self.problem) {
            (Some(img), _) => Ok(img),
            (None, Some(p)) => Err(p),
            (None, None) => Err(MemberProblem::Missing),
        };
        RawSample {
            key: self.key,
            position,
            image,
            // Unlabelled samples are allowed; -1 says so.
            label: self.label.unwrap_or(Ok(-1)),
            fields: self.fields,
        }
    }
}

/// Parses a `cls` member: an integer, surrounding whitespace allowed.
pub fn parse_label(data: &[u8]) -> Result<i64, String> {
    if data.is_empty() {
        return Err("cls member is empty".to_owned());
    }
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            let shown = String::from_utf8_lossy(&data[..data.len().min(32)]).into_owned();
            format!("cls member is not an integer: {shown:?}")
        })
}

/// Groups tar members into samples.
#[derive(Debug)]
pub struct SampleReader<R> {
    tar: TarReader<R>,
    /// Extensions of the members read as fields (lowercase), in the order
    /// the request asked for them.
    wanted: Vec<String>,
    current: Option<Group>,
    /// An error held back until the sample completed before it is returned.
    deferred: Option<RecordError>,
    /// Samples returned so far: the position of the next one.
    returned: u64,
}

impl<R: AsyncRead + Unpin> SampleReader<R> {
    pub fn new(inner: R, max_member_bytes: u64) -> Self {
        Self::starting(inner, max_member_bytes, SampleStart::default())
    }

    /// Reads a stream that starts at a sample's first member (`start`).
    pub fn starting(inner: R, max_member_bytes: u64, start: SampleStart) -> Self {
        Self {
            tar: TarReader::at(inner, max_member_bytes, start.offset),
            wanted: Vec::new(),
            current: None,
            deferred: None,
            returned: start.position,
        }
    }

    /// Also reads the members with these extensions (a sample's caption
    /// `txt`, its `json`, a `seg.png`), as [`RawSample::fields`] in this
    /// order. Matched against the whole extension after the key,
    /// case-insensitively, as WebDataset does.
    pub fn with_fields(mut self, extensions: &[String]) -> Self {
        self.wanted = extensions.iter().map(|e| e.to_ascii_lowercase()).collect();
        self
    }

    pub fn offset(&self) -> u64 {
        self.tar.offset()
    }

    /// Numbers a completed group: samples are counted in shard order.
    fn finish(&mut self, group: Group) -> RawSample {
        let position = self.returned;
        self.returned += 1;
        group.finish(position)
    }

    /// The next sample, or `None` at the end of the shard, with every
    /// member read as soon as it comes (no caller to ask).
    ///
    /// On a tar error, a sample whose members were all read (the failing
    /// member has another key) is still returned, and the error comes with
    /// the next call. A sample cut in the middle is lost with the rest of the
    /// shard; the error says where.
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, RecordError> {
        match self.next_sample_within(&mut |_| true).await? {
            ReadStep::Sample(sample) => Ok(sample),
            // Never: every member is admitted.
            ReadStep::Blocked { bytes } => Err(RecordError::Corrupt {
                format: RecordFormat::Tar,
                offset: self.offset(),
                reason: format!("a member of {bytes} bytes was refused"),
            }),
        }
    }

    /// As [`SampleReader::next_sample`], but before it reads an image
    /// member into memory it calls `admit` with the member's size. If
    /// `admit` says no, nothing is read: the call returns
    /// [`ReadStep::Blocked`], and the next call asks again for the same member.
    /// A sample is returned before any byte of the next sample is read, so
    /// what was admitted since the previous sample belongs to this one.
    pub async fn next_sample_within(&mut self, admit: &mut impl FnMut(u64) -> bool) -> Result<ReadStep, RecordError> {
        if let Some(err) = self.deferred.take() {
            return Err(err);
        }
        loop {
            let file = match self.tar.peek_file().await {
                Ok(Some(file)) => file.clone(),
                Ok(None) => return Ok(ReadStep::Sample(self.current.take().map(|g| self.finish(g)))),
                Err(err) => return self.fail(err),
            };
            let Some((key, ext)) = split_key(&file.name) else {
                self.skip_file().await?;
                continue;
            };
            if let Some(g) = self.current.take_if(|g| g.key != key) {
                // The next member starts another sample: this one is
                // complete, and the next member stays unread.
                return Ok(ReadStep::Sample(Some(self.finish(g))));
            }
            let ext = ext.to_ascii_lowercase();
            let wanted = self.wanted.len();
            let group = self.current.get_or_insert_with(|| Group {
                key: key.to_owned(),
                fields: vec![Ok(None); wanted],
                ..Group::default()
            });
            let limit = self.tar.max_member_bytes;
            let kind = match ext.as_str() {
                "jpg" | "jpeg" => Some(ImageKind::Jpeg),
                "png" => Some(ImageKind::Png),
                _ => None,
            };
            let as_fields: Vec<usize> = (0..self.wanted.len()).filter(|&i| self.wanted[i] == ext).collect();
            if !as_fields.is_empty() && (kind.is_none() || group.image.is_some()) && ext != "cls" {
                // A requested field's member (not also the sample's image
                // or label: those take their own paths, and are copied
                // into the field below).
                if file.size > limit {
                    for &i in &as_fields {
                        group.fields[i] = Err(MemberProblem::TooLarge {
                            ext: ext.clone(),
                            size: file.size,
                            limit,
                        });
                    }
                    self.skip_file().await?;
                } else if !admit(file.size) {
                    return Ok(ReadStep::Blocked { bytes: file.size });
                } else {
                    let data = self.read_file().await?.data;
                    if let (Some(data), Some(group)) = (data, self.current.as_mut()) {
                        group.set_fields(&as_fields, &data);
                    }
                }
                continue;
            }
            match kind {
                // The sample's image, if it has none yet.
                Some(kind) if group.image.is_none() => {
                    if file.size > limit {
                        group.problem = Some(MemberProblem::TooLarge {
                            ext,
                            size: file.size,
                            limit,
                        });
                        self.skip_file().await?;
                    } else if file.size == 0 {
                        group.problem = Some(MemberProblem::Empty { ext });
                        self.skip_file().await?;
                    } else if !admit(file.size) {
                        return Ok(ReadStep::Blocked { bytes: file.size });
                    } else {
                        let data = self.read_file().await?.data;
                        if let (Some(data), Some(group)) = (data, self.current.as_mut()) {
                            group.set_fields(&as_fields, &data);
                            group.image = Some((kind, data));
                        }
                    }
                }
                None if ext == "cls" => {
                    if file.size > MAX_LABEL_BYTES.min(limit) {
                        group.label = Some(Err(format!(
                            "cls member of {} bytes exceeds the label size limit of {} bytes",
                            file.size,
                            MAX_LABEL_BYTES.min(limit)
                        )));
                        self.skip_file().await?;
                    } else {
                        let data = self.read_file().await?.data;
                        if let (Some(data), Some(group)) = (data, self.current.as_mut()) {
                            group.set_fields(&as_fields, &data);
                            group.label = Some(parse_label(&data));
                        }
                    }
                }
                // A second image, or a member no sample uses.
                _ => self.skip_file().await?,
            }
        }
    }

    /// Reads the data of the member peeked at. A failure loses the sample
    /// being read (the member is one of its own).
    async fn read_file(&mut self) -> Result<Member, RecordError> {
        self.tar.read_file().await
    }

    async fn skip_file(&mut self) -> Result<(), RecordError> {
        self.tar.skip_file().await
    }

    /// A header failed to read with `err`: the sample being read is lost
    /// with it, unless the last member read belongs to another sample,
    /// which is then returned first (the error comes with the next call).
    fn fail(&mut self, err: RecordError) -> Result<ReadStep, RecordError> {
        let failing_key = self.tar.last_name.as_deref().and_then(split_key).map(|(k, _)| k);
        match self.current.take() {
            Some(g) if failing_key.is_some_and(|k| k != g.key) => {
                self.deferred = Some(err);
                Ok(ReadStep::Sample(Some(self.finish(g))))
            }
            _ => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar::{BLOCK, append_member, file_header, parse_header};

    pub(crate) fn tar_bytes(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in members {
            append_member(&mut out, name, data);
        }
        out.extend_from_slice(&[0u8; 2 * BLOCK]);
        out
    }

    #[tokio::test]
    async fn long_names_round_trip() {
        let long = format!("{}/img.jpg", "d".repeat(150));
        let tar = tar_bytes(&[(&long, b"x")]);
        let mut r = TarReader::new(&tar[..], 1 << 20);
        let m = r.next_member().await.unwrap().unwrap();
        assert_eq!(m.name, long);
    }

    async fn all(bytes: &[u8], limit: u64) -> (Vec<RawSample>, Option<RecordError>) {
        let mut r = SampleReader::new(bytes, limit);
        let mut out = Vec::new();
        loop {
            match r.next_sample().await {
                Ok(Some(s)) => out.push(s),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[test]
    fn keys_split_like_webdataset() {
        assert_eq!(split_key("a/b/c.jpg"), Some(("a/b/c", "jpg")));
        assert_eq!(split_key("dir.v2/img.seg.png"), Some(("dir.v2/img", "seg.png")));
        assert_eq!(split_key("noext"), None);
        assert_eq!(split_key("d/.hidden"), None);
    }

    #[tokio::test]
    async fn groups_members_into_samples() {
        let tar = tar_bytes(&[
            ("x/a.jpg", b"AAAA"),
            ("x/a.cls", b"3\n"),
            ("x/a.txt", b"ignored"),
            ("x/b.png", b"BB"),
            ("x/c.cls", b"7"),
        ]);
        let (samples, err) = all(&tar, 1 << 20).await;
        assert_eq!(err, None);
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].key, "x/a");
        assert_eq!(samples[0].label, Ok(3));
        assert_eq!(samples[0].image.as_ref().unwrap().0, ImageKind::Jpeg);
        assert_eq!(samples[1].label, Ok(-1));
        assert_eq!(samples[1].image.as_ref().unwrap().0, ImageKind::Png);
        assert!(samples[2].image.is_err());
    }

    #[tokio::test]
    async fn oversized_and_empty_members_are_reported_not_loaded() {
        let big = vec![1u8; 5000];
        let tar = tar_bytes(&[("a.jpg", &big), ("b.jpg", b""), ("c.jpg", b"ok")]);
        let (samples, err) = all(&tar, 4096).await;
        assert_eq!(err, None);
        let too_large = samples[0].image.as_ref().unwrap_err();
        assert!(matches!(
            too_large,
            MemberProblem::TooLarge {
                size: 5000,
                limit: 4096,
                ..
            }
        ));
        assert_eq!(
            too_large.to_string(),
            "jpg member of 5000 bytes exceeds the member size limit of 4096 bytes"
        );
        let empty = samples[1].image.as_ref().unwrap_err();
        assert_eq!(empty.to_string(), "jpg member is empty");
        assert!(samples[2].image.is_ok());
    }

    #[tokio::test]
    async fn truncated_tar_keeps_what_came_before() {
        let tar = tar_bytes(&[("a.jpg", b"1234"), ("b.jpg", &[7u8; 3000])]);
        let cut = &tar[..BLOCK * 2 + BLOCK + 1000];
        let (samples, err) = all(cut, 1 << 20).await;
        assert_eq!(samples.len(), 1);
        assert!(matches!(err, Some(RecordError::Truncated { .. })), "{err:?}");
    }

    #[tokio::test]
    async fn corrupt_header_is_an_error() {
        let mut tar = tar_bytes(&[("a.jpg", b"1234")]);
        tar[10] ^= 0xff;
        let (_, err) = all(&tar, 1 << 20).await;
        assert!(matches!(err, Some(RecordError::Corrupt { .. })), "{err:?}");
    }

    /// A header block with `size` in GNU base-256 and a valid checksum.
    fn base256_header(name: &str, size: u64, kind: u8) -> Vec<u8> {
        let mut h = file_header(name, 0, 0);
        h[124] = 0x80;
        h[125..128].fill(0);
        h[128..136].copy_from_slice(&size.to_be_bytes());
        h[156] = kind;
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }

    #[tokio::test]
    async fn sizes_near_u64_max_are_truncation_not_overflow() {
        // The size plus its padding overflowed u64: a panic with overflow
        // checks, a skip of the wrapped sum without. Also a fuzz seed.
        for kind in [b'0', b'5', b'g'] {
            for size in [u64::MAX, u64::MAX - 510, 1 << 40] {
                let tar = base256_header("a.jpg", size, kind);
                assert_eq!(
                    parse_header(tar[..].try_into().unwrap(), 0).unwrap().unwrap().size,
                    size
                );
                let (samples, err) = all(&tar, 1 << 20).await;
                assert!(samples.is_empty());
                assert!(
                    matches!(
                        err,
                        Some(RecordError::Truncated {
                            format: RecordFormat::Tar,
                            offset: 512,
                            ..
                        })
                    ),
                    "{err:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn requested_members_are_read_as_fields_in_the_order_asked() {
        let tar = tar_bytes(&[
            ("a.jpg", b"\xff\xd8a"),
            ("a.cls", b"3"),
            ("a.json", br#"{"w": 1}"#),
            ("a.TXT", b"a caption"),
            ("b.jpg", b"\xff\xd8b"),
            ("b.txt", &[b'x'; 40]),
        ]);
        let wanted = ["txt".to_owned(), "json".to_owned(), "cls".to_owned(), "jpg".to_owned()];
        let mut r = SampleReader::new(&tar[..], 32).with_fields(&wanted);
        let bytes = |s: &'static [u8]| Ok(Some(RawValue::Bytes(Bytes::from_static(s))));
        let a = r.next_sample().await.unwrap().unwrap();
        assert_eq!(a.label, Ok(3));
        assert_eq!(
            a.fields,
            vec![
                bytes(b"a caption"),
                bytes(br#"{"w": 1}"#),
                bytes(b"3"),
                bytes(b"\xff\xd8a")
            ]
        );
        // Over the member limit: that field's problem, read past; a member
        // the sample lacks: missing.
        let b = r.next_sample().await.unwrap().unwrap();
        assert!(
            matches!(&b.fields[0], Err(MemberProblem::TooLarge { size: 40, .. })),
            "{:?}",
            b.fields
        );
        assert_eq!(b.fields[1], Ok(None));
        assert!(r.next_sample().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn image_members_are_read_only_once_admitted_and_the_rest_not_held() {
        let big_txt = vec![b't'; 50_000];
        let tar = tar_bytes(&[
            ("a.jpg", &[1u8; 1000]),
            ("a.cls", b"3"),
            ("a.txt", &big_txt),
            ("a.png", &[2u8; 700]),
            ("b.jpg", &[3u8; 2000]),
            ("b.cls", b"4"),
        ]);
        let mut r = SampleReader::new(&tar[..], 1 << 20);
        let asked = std::cell::RefCell::new(Vec::new());
        let mut yes = |bytes| {
            asked.borrow_mut().push(bytes);
            true
        };
        let ReadStep::Sample(Some(a)) = r.next_sample_within(&mut yes).await.unwrap() else {
            panic!("no first sample");
        };
        // Its image was asked for; the text and the second image were
        // read past, never asked for; b's header is read, not its data.
        assert_eq!((a.key.as_str(), a.label.clone()), ("a", Ok(3)));
        assert_eq!(a.image.as_ref().unwrap().1.len(), 1000);
        assert_eq!(*asked.borrow(), vec![1000]);
        let before_b = r.offset();
        let mut no = |_| false;
        for _ in 0..2 {
            assert!(matches!(
                r.next_sample_within(&mut no).await.unwrap(),
                ReadStep::Blocked { bytes: 2000 }
            ));
            assert_eq!(r.offset(), before_b, "nothing read while blocked");
        }
        let ReadStep::Sample(Some(b)) = r.next_sample_within(&mut yes).await.unwrap() else {
            panic!("no second sample");
        };
        assert_eq!((b.key.as_str(), b.label.clone(), b.position), ("b", Ok(4), 1));
        assert_eq!(b.image.as_ref().unwrap().1[..], [3u8; 2000]);
        assert!(matches!(
            r.next_sample_within(&mut no).await.unwrap(),
            ReadStep::Sample(None)
        ));
    }

    #[tokio::test]
    async fn oversized_empty_and_label_members_are_never_asked_for() {
        let long_label = vec![b'7'; MAX_LABEL_BYTES as usize + 1];
        let tar = tar_bytes(&[
            ("a.jpg", &[1u8; 5000]),
            ("b.jpg", b""),
            ("c.jpg", b"ok"),
            ("c.cls", &long_label),
        ]);
        let mut r = SampleReader::new(&tar[..], 4096);
        let mut asked = Vec::new();
        let mut samples = Vec::new();
        loop {
            match r
                .next_sample_within(&mut |bytes| {
                    asked.push(bytes);
                    true
                })
                .await
                .unwrap()
            {
                ReadStep::Sample(Some(s)) => samples.push(s),
                ReadStep::Sample(None) => break,
                ReadStep::Blocked { .. } => unreachable!("everything asked for is admitted"),
            }
        }
        assert_eq!(asked, vec![2], "only c's image, of 2 bytes");
        assert!(matches!(
            samples[0].image,
            Err(MemberProblem::TooLarge { size: 5000, .. })
        ));
        assert!(matches!(samples[1].image, Err(MemberProblem::Empty { .. })));
        assert_eq!(
            samples[2].label,
            Err("cls member of 4097 bytes exceeds the label size limit of 4096 bytes".to_owned())
        );
    }
}
