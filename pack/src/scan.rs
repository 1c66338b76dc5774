//! The input of `stoker pack` when it is an ImageFolder: the tree listed
//! ([`scan_image_folder`]), each file's bytes checked as a worker would
//! before decoding ([`inspect`]), the whole folder checked before packing
//! (`--strict`: [`check_image_folder`]), and the error for a folder of
//! another layout ([`layout_error`]).

use std::path::{Path, PathBuf};

use stoker_formats::image::{ImageKind, is_image_file_name};

use super::error::{PackError, io_err};
use stoker_storage::PackReport;

/// One image to pack.
#[derive(Debug, Clone)]
pub struct SourceImage {
    pub path: PathBuf,
    pub key: String,
    pub ext: String,
    pub label: i64,
    pub size: u64,
}

/// An ImageFolder tree as [`scan_image_folder`] lists it.
#[derive(Debug, Clone)]
pub struct ImageFolder {
    /// Images by name (jpg, jpeg, png), class folders sorted, sorted within.
    pub images: Vec<SourceImage>,
    pub classes: Vec<String>,
    /// Other files in the class folders (not hidden ones): left out.
    pub not_images: Vec<PathBuf>,
}

/// Why a file name is no image for `pack`.
pub(super) const NOT_AN_IMAGE_NAME: &str = "not an image file name (jpg, jpeg, png)";

/// Lists an ImageFolder tree: class folders sorted, images sorted within.
pub fn scan_image_folder(input: &Path) -> Result<ImageFolder, PackError> {
    if !input.is_dir() {
        return Err(PackError::NoInput(input.to_owned()));
    }
    let mut classes: Vec<String> = std::fs::read_dir(input)
        .map_err(io_err(input))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    classes.sort();
    let mut images = Vec::new();
    let mut not_images = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let dir = input.join(class);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
            .collect();
        files.sort();
        for path in files {
            if !is_image_file_name(&path.to_string_lossy()) {
                not_images.push(path);
                continue;
            }
            let Some(ext) = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()) else {
                continue;
            };
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            // A dot in the key would split it differently when read back.
            let key = format!("{}/{}", class.replace('.', "_"), stem.replace('.', "_"));
            let size = path.metadata().map_err(io_err(&path))?.len();
            images.push(SourceImage {
                path,
                key,
                ext,
                label: label as i64,
                size,
            });
        }
    }
    if images.is_empty() {
        return Err(PackError::Empty(input.to_owned()));
    }
    Ok(ImageFolder {
        images,
        classes,
        not_images,
    })
}

/// What [`inspect`] makes of one file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inspection {
    Good,
    /// No image: not packed.
    LeftOut(&'static str),
    /// An image every worker will skip: packed, and reported.
    Flagged(&'static str),
}

/// The checks a worker makes of one file's bytes before decoding it
/// (`stoker_formats::image`: its kind, a readable header, and for a JPEG
/// an end-of-image marker after its last scan), without the decode; the
/// pixel limit is the worker's own.
pub(super) fn inspect(data: &[u8]) -> Inspection {
    use stoker_formats::image::{header_dimensions, jpeg_is_complete, sniff};
    if data.is_empty() {
        return Inspection::LeftOut("empty file");
    }
    let Some(kind) = sniff(data) else {
        return Inspection::LeftOut("not a jpeg or png (by its contents)");
    };
    match (kind, header_dimensions(kind, data).is_ok()) {
        (ImageKind::Jpeg, false) => Inspection::Flagged("jpeg without a readable frame header"),
        (ImageKind::Png, false) => Inspection::Flagged("png without a readable header"),
        (ImageKind::Jpeg, true) if !jpeg_is_complete(data) => {
            Inspection::Flagged("truncated jpeg (no end-of-image marker after its last scan)")
        }
        _ => Inspection::Good,
    }
}

/// What `pack` would leave out of `folder` or flag, reading every image:
/// `stoker pack --strict` refuses a folder with any, before writing.
pub fn check_image_folder(folder: &ImageFolder) -> Result<PackReport, PackError> {
    let mut report = PackReport::default();
    for path in &folder.not_images {
        report.left_out.add(&path.display().to_string(), NOT_AN_IMAGE_NAME);
    }
    for img in &folder.images {
        let data = std::fs::read(&img.path).map_err(io_err(&img.path))?;
        match inspect(&data) {
            Inspection::Good => {}
            Inspection::LeftOut(reason) => report.left_out.add(&img.path.display().to_string(), reason),
            Inspection::Flagged(reason) => report.flagged.add(&img.path.display().to_string(), reason),
        }
    }
    Ok(report)
}

/// Why a local folder that is no ImageFolder is no dataset to convert
/// either, in words a newcomer can act on: images directly in it
/// ([`PackError::Flat`]) or nothing at all ([`PackError::EmptyFolder`]).
/// `None` when it may hold shards (the converter then says what it found).
pub fn layout_error(input: &Path) -> Option<PackError> {
    let entries: Vec<PathBuf> = std::fs::read_dir(input)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    if entries.is_empty() {
        return Some(PackError::EmptyFolder(input.to_owned()));
    }
    let images = entries
        .iter()
        .filter(|p| p.is_file() && is_image_file_name(&p.to_string_lossy()))
        .count();
    (images > 0).then(|| PackError::Flat {
        dir: input.to_owned(),
        images,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_or_empty_folder_is_told_the_layout_pack_expects() {
        let dir = tempfile::tempdir().unwrap();
        let err = layout_error(dir.path()).unwrap().to_string();
        assert!(
            err.contains("is empty") && err.contains("one subfolder per class"),
            "{err}"
        );
        std::fs::write(dir.path().join("a.jpg"), b"x").unwrap();
        std::fs::write(dir.path().join("b.PNG"), b"x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let err = layout_error(dir.path()).unwrap().to_string();
        let path = dir.path().display().to_string();
        assert!(err.contains("holds 2 image(s) but no class subfolders"), "{err}");
        assert!(err.contains(&format!("mkdir {path}/all")), "{err}");
        // Shards (or anything else): the converter's to judge.
        let shards = tempfile::tempdir().unwrap();
        std::fs::write(shards.path().join("shard-0.tar"), b"x").unwrap();
        assert!(layout_error(shards.path()).is_none());
    }
}
