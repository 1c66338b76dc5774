//! WebDataset shards: a streaming tar reader and the grouping of members into
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
//! The header parser is a pure function over one 512-byte block so that it
//! can be fuzzed on its own (`fuzz/fuzz_targets/tar_header.rs`); the reader
//! and the grouping are fuzzed together over whole streams (`tar_stream`).

use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::shard::SampleStart;
use crate::stream::{Counted, Shortfall};

pub use crate::image::ImageKind;
pub use crate::sample::{MemberProblem, RawField, RawSample, RawValue, Step};

const BLOCK: usize = 512;

/// The largest `cls` member read: a label is an integer, so anything
/// longer is a label error, read past without being held.
pub const MAX_LABEL_BYTES: u64 = 4096;

/// Why a shard could not be read to its end.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TarError {
    #[error("tar truncated at byte {offset}: {what}")]
    Truncated { offset: u64, what: &'static str },
    #[error("corrupt tar at byte {offset}: {reason}")]
    Corrupt { offset: u64, reason: String },
    #[error("read failed at byte {offset}: {reason}")]
    Io { offset: u64, reason: String },
}

impl From<Shortfall> for TarError {
    fn from(s: Shortfall) -> Self {
        match s {
            Shortfall::Truncated { offset, what } => Self::Truncated { offset, what },
            Shortfall::Io { offset, reason } => Self::Io { offset, reason },
            Shortfall::Corrupt { offset, reason } => Self::Corrupt { offset, reason },
        }
    }
}

impl TarError {
    /// Data errors are a property of the shard; I/O errors of the transport.
    pub fn is_io(&self) -> bool {
        matches!(self, Self::Io { .. })
    }
}

/// One parsed tar header.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    pub size: u64,
    pub kind: u8,
}

fn field_str(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

fn parse_octal(bytes: &[u8]) -> Option<u64> {
    // GNU base-256 for sizes past 8 GiB: high bit of the first byte set.
    if let Some(&first) = bytes.first()
        && first & 0x80 != 0
    {
        let mut v: u64 = u64::from(first & 0x7f);
        for &b in &bytes[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let s = field_str(bytes);
    let s = std::str::from_utf8(s)
        .ok()?
        .trim_matches(|c: char| c == ' ' || c == '\0');
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

/// Parses one header block. `Ok(None)` is an all-zero block (end of archive).
pub fn parse_header(block: &[u8; BLOCK], offset: u64) -> Result<Option<Header>, TarError> {
    if block.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let corrupt = |reason: String| TarError::Corrupt { offset, reason };
    let stored = parse_octal(&block[148..156]).ok_or_else(|| corrupt("unreadable checksum".into()))?;
    let unsigned: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) })
        .sum();
    let signed: i64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                i64::from(b as i8)
            }
        })
        .sum();
    if stored != unsigned && stored as i64 != signed {
        return Err(corrupt(format!(
            "checksum mismatch (stored {stored}, computed {unsigned})"
        )));
    }
    let size = parse_octal(&block[124..136]).ok_or_else(|| corrupt("unreadable size".into()))?;
    let kind = block[156];
    let mut name = String::from_utf8_lossy(field_str(&block[0..100])).into_owned();
    // ustar: a prefix for long paths.
    if &block[257..262] == b"ustar" {
        let prefix = field_str(&block[345..500]);
        if !prefix.is_empty() && block[263] != b' ' {
            name = format!("{}/{}", String::from_utf8_lossy(prefix), name);
        }
    }
    Ok(Some(Header { name, size, kind }))
}

/// A regular-file member of a tar archive.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    /// The member's bytes, or `None` when it exceeded the size limit (its
    /// data was read past and discarded).
    pub data: Option<Bytes>,
    pub size: u64,
}

/// A regular file's header, read before its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub name: String,
    pub size: u64,
}

/// Reads tar members from a stream, one at a time.
#[derive(Debug)]
pub struct TarReader<R> {
    stream: Counted<R>,
    done: bool,
    max_member_bytes: u64,
    /// Path of the last regular-file header read, also when its data then
    /// failed to arrive.
    last_name: Option<String>,
    /// A regular file whose header was read ([`TarReader::peek_file`]) and
    /// whose data was not, yet.
    pending: Option<FileHeader>,
}

impl<R: AsyncRead + Unpin> TarReader<R> {
    pub fn new(inner: R, max_member_bytes: u64) -> Self {
        Self::at(inner, max_member_bytes, 0)
    }

    /// A reader of a stream that starts at byte `offset` of the tar.
    fn at(inner: R, max_member_bytes: u64, offset: u64) -> Self {
        Self {
            stream: Counted::at(inner, offset),
            done: false,
            max_member_bytes,
            last_name: None,
            pending: None,
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.stream.offset()
    }

    async fn fill(&mut self, buf: &mut [u8], what: &'static str, eof_ok: bool) -> Result<bool, TarError> {
        Ok(self.stream.fill(buf, what, eof_ok).await?)
    }

    async fn skip(&mut self, n: u64, what: &'static str) -> Result<(), TarError> {
        Ok(self.stream.skip(n, what).await?)
    }

    /// Skips a member's data and its padding. Two steps: a size from a
    /// base-256 field plus its padding can overflow u64.
    async fn skip_member(&mut self, size: u64, what: &'static str) -> Result<(), TarError> {
        self.skip(size, what).await?;
        self.skip(padding(size), what).await
    }

    async fn read_data(&mut self, size: u64, what: &'static str) -> Result<Vec<u8>, TarError> {
        let mut data = vec![0u8; size as usize];
        self.fill(&mut data, what, false).await?;
        self.skip(padding(size), what).await?;
        Ok(data)
    }

    /// The next regular file, or `None` at the end of the archive.
    pub async fn next_member(&mut self) -> Result<Option<Member>, TarError> {
        if self.peek_file().await?.is_none() {
            return Ok(None);
        }
        self.read_file().await.map(Some)
    }

    /// The next regular file's header, its data not read yet: the same one
    /// until [`TarReader::read_file`] or [`TarReader::skip_file`] takes it.
    /// `None` at the end of the archive.
    pub async fn peek_file(&mut self) -> Result<Option<&FileHeader>, TarError> {
        if self.pending.is_none() {
            self.pending = self.next_file_header().await?;
        }
        Ok(self.pending.as_ref())
    }

    /// Reads the data of the file [`TarReader::peek_file`] returned: `None`
    /// data when it is over the size limit (read past).
    pub async fn read_file(&mut self) -> Result<Member, TarError> {
        let Some(FileHeader { name, size }) = self.pending.take() else {
            return Err(TarError::Corrupt {
                offset: self.offset(),
                reason: "no member header to read the data of".to_owned(),
            });
        };
        if size > self.max_member_bytes {
            self.skip_member(size, "oversized member").await?;
            return Ok(Member { name, data: None, size });
        }
        let data = self.read_data(size, "member data").await?;
        Ok(Member {
            name,
            data: Some(Bytes::from(data)),
            size,
        })
    }

    /// Reads past the data of the file [`TarReader::peek_file`] returned.
    pub async fn skip_file(&mut self) -> Result<(), TarError> {
        match self.pending.take() {
            Some(file) => self.skip_member(file.size, "member data").await,
            None => Ok(()),
        }
    }

    /// Reads headers up to the next regular file's.
    async fn next_file_header(&mut self) -> Result<Option<FileHeader>, TarError> {
        let mut long_name: Option<String> = None;
        loop {
            if self.done {
                return Ok(None);
            }
            let header_at = self.stream.offset();
            let mut block = [0u8; BLOCK];
            if !self.fill(&mut block, "header", true).await? {
                // Archives cut exactly at a member boundary without the two
                // end blocks are common (concatenated writers): accept.
                self.done = true;
                return Ok(None);
            }
            let Some(header) = parse_header(&block, header_at)? else {
                self.done = true;
                return Ok(None);
            };
            match header.kind {
                // GNU long name: the data is the next member's path.
                b'L' => {
                    if header.size > 64 * 1024 {
                        return Err(TarError::Corrupt {
                            offset: header_at,
                            reason: format!("long name of {} bytes", header.size),
                        });
                    }
                    let data = self.read_data(header.size, "long name").await?;
                    long_name = Some(String::from_utf8_lossy(field_str(&data)).into_owned());
                }
                // pax extended header: may carry `path=`.
                b'x' => {
                    if header.size > 1024 * 1024 {
                        return Err(TarError::Corrupt {
                            offset: header_at,
                            reason: format!("pax header of {} bytes", header.size),
                        });
                    }
                    let data = self.read_data(header.size, "pax header").await?;
                    if let Some(path) = pax_path(&data) {
                        long_name = Some(path);
                    }
                }
                // Regular files.
                b'0' | b'\0' | b'7' => {
                    let name = long_name.take().unwrap_or(header.name);
                    self.last_name = Some(name.clone());
                    return Ok(Some(FileHeader {
                        name,
                        size: header.size,
                    }));
                }
                // Directories, links, global pax headers...: skip the data.
                _ => {
                    long_name = None;
                    self.skip_member(header.size, "member data").await?;
                }
            }
        }
    }
}

/// Builds the header block(s) for a regular file member: a GNU long-name
/// member first when the path does not fit in 100 bytes.
pub fn file_header(name: &str, size: u64, mtime: u64) -> Vec<u8> {
    fn block(name: &[u8], size: u64, kind: u8, mtime: u64) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        let n = name.len().min(100);
        h[..n].copy_from_slice(&name[..n]);
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        h[124..136].copy_from_slice(format!("{:011o}\0", size).as_bytes());
        h[136..148].copy_from_slice(format!("{:011o}\0", mtime & 0o777_7777_7777).as_bytes());
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar ");
        h[263..265].copy_from_slice(b" \0");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }
    let mut out = Vec::with_capacity(BLOCK * 3);
    if name.len() > 100 {
        let mut long = name.as_bytes().to_vec();
        long.push(0);
        out.extend_from_slice(&block(b"././@LongLink", long.len() as u64, b'L', 0));
        out.extend_from_slice(&long);
        out.resize(out.len() + padding(long.len() as u64) as usize, 0);
    }
    out.extend_from_slice(&block(name.as_bytes(), size, b'0', mtime));
    out
}

/// Zero bytes that follow `size` bytes of member data.
pub fn padding(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

/// The `path` record of a pax extended header ("<len> path=<value>\n").
fn pax_path(data: &[u8]) -> Option<String> {
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        if len <= space || len > rest.len() {
            return None;
        }
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(v) = record.strip_prefix(b"path=") {
            return Some(String::from_utf8_lossy(v).into_owned());
        }
        rest = &rest[len..];
    }
    None
}

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
    deferred: Option<TarError>,
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
    pub async fn next_sample(&mut self) -> Result<Option<RawSample>, TarError> {
        match self.next_sample_within(&mut |_| true).await? {
            Step::Sample(sample) => Ok(sample),
            // Never: every member is admitted.
            Step::Blocked { bytes } => Err(TarError::Corrupt {
                offset: self.offset(),
                reason: format!("a member of {bytes} bytes was refused"),
            }),
        }
    }

    /// As [`SampleReader::next_sample`], but before it reads an image
    /// member into memory it calls `admit` with the member's size. If
    /// `admit` says no, nothing is read: the call returns
    /// [`Step::Blocked`], and the next call asks again for the same member.
    /// A sample is returned before any byte of the next sample is read, so
    /// what was admitted since the previous sample belongs to this one.
    pub async fn next_sample_within(&mut self, admit: &mut impl FnMut(u64) -> bool) -> Result<Step, TarError> {
        if let Some(err) = self.deferred.take() {
            return Err(err);
        }
        loop {
            let file = match self.tar.peek_file().await {
                Ok(Some(file)) => file.clone(),
                Ok(None) => return Ok(Step::Sample(self.current.take().map(|g| self.finish(g)))),
                Err(err) => return self.fail(err),
            };
            let Some((key, ext)) = split_key(&file.name) else {
                self.skip_file().await?;
                continue;
            };
            if let Some(g) = self.current.take_if(|g| g.key != key) {
                // The next member starts another sample: this one is
                // complete, and the next member stays unread.
                return Ok(Step::Sample(Some(self.finish(g))));
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
                    return Ok(Step::Blocked { bytes: file.size });
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
                        return Ok(Step::Blocked { bytes: file.size });
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
    async fn read_file(&mut self) -> Result<Member, TarError> {
        self.tar.read_file().await
    }

    async fn skip_file(&mut self) -> Result<(), TarError> {
        self.tar.skip_file().await
    }

    /// A header failed to read with `err`: the sample being read is lost
    /// with it, unless the last member read belongs to another sample,
    /// which is then returned first (the error comes with the next call).
    fn fail(&mut self, err: TarError) -> Result<Step, TarError> {
        let failing_key = self.tar.last_name.as_deref().and_then(split_key).map(|(k, _)| k);
        match self.current.take() {
            Some(g) if failing_key.is_some_and(|k| k != g.key) => {
                self.deferred = Some(err);
                Ok(Step::Sample(Some(self.finish(g))))
            }
            _ => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tar_bytes(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in members {
            out.extend_from_slice(&file_header(name, data.len() as u64, 0));
            out.extend_from_slice(data);
            out.resize(out.len() + padding(data.len() as u64) as usize, 0);
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

    async fn all(bytes: &[u8], limit: u64) -> (Vec<RawSample>, Option<TarError>) {
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
        assert!(matches!(err, Some(TarError::Truncated { .. })), "{err:?}");
    }

    #[tokio::test]
    async fn corrupt_header_is_an_error() {
        let mut tar = tar_bytes(&[("a.jpg", b"1234")]);
        tar[10] ^= 0xff;
        let (_, err) = all(&tar, 1 << 20).await;
        assert!(matches!(err, Some(TarError::Corrupt { .. })), "{err:?}");
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
                assert!(matches!(err, Some(TarError::Truncated { offset: 512, .. })), "{err:?}");
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
        let Step::Sample(Some(a)) = r.next_sample_within(&mut yes).await.unwrap() else {
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
                Step::Blocked { bytes: 2000 }
            ));
            assert_eq!(r.offset(), before_b, "nothing read while blocked");
        }
        let Step::Sample(Some(b)) = r.next_sample_within(&mut yes).await.unwrap() else {
            panic!("no second sample");
        };
        assert_eq!((b.key.as_str(), b.label.clone(), b.position), ("b", Ok(4), 1));
        assert_eq!(b.image.as_ref().unwrap().1[..], [3u8; 2000]);
        assert!(matches!(
            r.next_sample_within(&mut no).await.unwrap(),
            Step::Sample(None)
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
                Step::Sample(Some(s)) => samples.push(s),
                Step::Sample(None) => break,
                Step::Blocked { .. } => unreachable!("everything asked for is admitted"),
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

    #[test]
    fn pax_path_records() {
        let rec = b"32 path=some/very/long/name.jpg\n";
        assert_eq!(pax_path(rec).as_deref(), Some("some/very/long/name.jpg"));
        assert_eq!(pax_path(b"garbage"), None);
    }
}
