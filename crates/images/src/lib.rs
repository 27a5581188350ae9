//! OCI images for sandboxd: pulls from registries, archive import and export, and the
//! safe unpacking of untrusted layers into the runtime's content-addressed layer store.

pub mod archive;
pub mod build_cache;
pub mod build_context;
pub mod dockerfile;
pub mod export;
pub mod gc;
pub mod manifest_fetch;
pub mod platform;
pub mod pull;
pub mod reference;
pub mod room;
pub mod store;
pub mod unpack;

pub use pull::{Credential, PullOptions};
pub use room::RoomPolicy;
pub use store::Images;
pub use unpack::{Budget, UnpackError, UnpackLimits};

/// Everything getting an image can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("invalid image reference {0:?}: {1}")]
    InvalidReference(String, String),
    #[error("registry {registry}: {message}")]
    Registry { registry: String, message: String },
    #[error(
        "registry {registry} refused the credentials (or asks for some): {message}; \
         log in with `sandboxd registry login {registry}`"
    )]
    Unauthorized { registry: String, message: String },
    #[error("blob {digest} does not match its digest (got sha256:{actual})")]
    DigestMismatch { digest: String, actual: String },
    #[error(
        "registry {registry}: the download of blob {digest} broke off after {got} of \
         {size} bytes ({message}); nothing of it was kept, pull again"
    )]
    Interrupted {
        registry: String,
        digest: String,
        got: u64,
        size: u64,
        message: String,
    },
    #[error("blob {digest} is larger than its descriptor's {size} bytes")]
    BlobTooLarge { digest: String, size: u64 },
    #[error("not enough room in the data dir: {0}; nothing of it was kept")]
    NoRoom(String),
    #[error(
        "the image is too large: {0} (the cap across its layers is SANDBOXD_IMAGE_MAX_MB, \
         16384 MiB by default)"
    )]
    TooLarge(String),
    #[error("busy: {0}")]
    Busy(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("malformed image: {0}")]
    Malformed(String),
    #[error("unsafe layer {digest}")]
    Layer {
        digest: String,
        #[source]
        source: UnpackError,
    },
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] sandboxd_runtime::RuntimeError),
}

/// Maps an `std::io::Error` at `path` into [`ImageError::Io`].
pub(crate) fn io(
    what: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> ImageError {
    let path = path.to_path_buf();
    move |source| ImageError::Io { what, path, source }
}

/// `sha256:<64 lowercase hex>` → the hex; anything else is refused.
pub(crate) fn sha256_hex(digest: &str) -> Result<&str, ImageError> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| ImageError::Unsupported(format!("digest {digest:?} is not sha256")))?;
    let ok = hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    match ok {
        true => Ok(hex),
        false => Err(ImageError::Malformed(format!("bad digest {digest:?}"))),
    }
}
