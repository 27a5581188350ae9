//! The Linux-native backend.
