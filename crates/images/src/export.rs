//! Exporting images as OCI archives.
