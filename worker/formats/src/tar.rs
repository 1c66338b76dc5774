//! Tar archives, read as a stream: ustar, GNU long names and pax paths.
//!
//! The header parser is a pure function over one 512-byte block so that it
//! can be fuzzed on its own (`fuzz/fuzz_targets/tar_header.rs`); the reader
//! is fuzzed with WebDataset's grouping over whole streams (`tar_stream`).
//! A file's header is read before its data ([`TarReader::peek_file`]), so
//! that a caller can decide whether to hold the data at all.

use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::error::{RecordError, RecordFormat};
use crate::stream::Counted;

/// Bytes of a tar block.
pub(crate) const BLOCK: usize = 512;

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
pub fn parse_header(block: &[u8; BLOCK], offset: u64) -> Result<Option<Header>, RecordError> {
    if block.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let corrupt = |reason: String| RecordError::Corrupt {
        format: RecordFormat::Tar,
        offset,
        reason,
    };
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
    pub(crate) max_member_bytes: u64,
    /// Path of the last regular-file header read, also when its data then
    /// failed to arrive.
    pub(crate) last_name: Option<String>,
    /// A regular file whose header was read ([`TarReader::peek_file`]) and
    /// whose data was not, yet.
    pending: Option<FileHeader>,
}

impl<R: AsyncRead + Unpin> TarReader<R> {
    pub fn new(inner: R, max_member_bytes: u64) -> Self {
        Self::at(inner, max_member_bytes, 0)
    }

    /// A reader of a stream that starts at byte `offset` of the tar.
    pub(crate) fn at(inner: R, max_member_bytes: u64, offset: u64) -> Self {
        Self {
            stream: Counted::at(inner, offset, RecordFormat::Tar),
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

    async fn fill(&mut self, buf: &mut [u8], what: &'static str, eof_ok: bool) -> Result<bool, RecordError> {
        self.stream.fill(buf, what, eof_ok).await
    }

    async fn skip(&mut self, n: u64, what: &'static str) -> Result<(), RecordError> {
        self.stream.skip(n, what).await
    }

    /// Skips a member's data and its padding. Two steps: a size from a
    /// base-256 field plus its padding can overflow u64.
    async fn skip_member(&mut self, size: u64, what: &'static str) -> Result<(), RecordError> {
        self.skip(size, what).await?;
        self.skip(padding(size), what).await
    }

    async fn read_data(&mut self, size: u64, what: &'static str) -> Result<Vec<u8>, RecordError> {
        let mut data = vec![0u8; size as usize];
        self.fill(&mut data, what, false).await?;
        self.skip(padding(size), what).await?;
        Ok(data)
    }

    /// The next regular file, or `None` at the end of the archive.
    pub async fn next_member(&mut self) -> Result<Option<Member>, RecordError> {
        if self.peek_file().await?.is_none() {
            return Ok(None);
        }
        self.read_file().await.map(Some)
    }

    /// The next regular file's header, its data not read yet: the same one
    /// until [`TarReader::read_file`] or [`TarReader::skip_file`] takes it.
    /// `None` at the end of the archive.
    pub async fn peek_file(&mut self) -> Result<Option<&FileHeader>, RecordError> {
        if self.pending.is_none() {
            self.pending = self.next_file_header().await?;
        }
        Ok(self.pending.as_ref())
    }

    /// Reads the data of the file [`TarReader::peek_file`] returned: `None`
    /// data when it is over the size limit (read past).
    pub async fn read_file(&mut self) -> Result<Member, RecordError> {
        let Some(FileHeader { name, size }) = self.pending.take() else {
            return Err(RecordError::Corrupt {
                format: RecordFormat::Tar,
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
    pub async fn skip_file(&mut self) -> Result<(), RecordError> {
        match self.pending.take() {
            Some(file) => self.skip_member(file.size, "member data").await,
            None => Ok(()),
        }
    }

    /// Reads headers up to the next regular file's.
    async fn next_file_header(&mut self) -> Result<Option<FileHeader>, RecordError> {
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
                        return Err(RecordError::Corrupt {
                            format: RecordFormat::Tar,
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
                        return Err(RecordError::Corrupt {
                            format: RecordFormat::Tar,
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

/// Appends a regular file member to a tar being written: its header
/// ([`file_header`], mtime 0), `data`, and the zeros to its last block's
/// end. The writers' one framing of a member (`stoker pack`, test shards);
/// the archive's two zero end blocks are the caller's.
pub fn append_member(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    out.extend_from_slice(&file_header(name, data.len() as u64, 0));
    out.extend_from_slice(data);
    out.resize(out.len() + padding(data.len() as u64) as usize, 0);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_path_records() {
        let rec = b"32 path=some/very/long/name.jpg\n";
        assert_eq!(pax_path(rec).as_deref(), Some("some/very/long/name.jpg"));
        assert_eq!(pax_path(b"garbage"), None);
    }
}
