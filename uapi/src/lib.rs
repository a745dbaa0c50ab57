//! Plain-data mirror of the Linux RDMA uverbs UAPI headers.
#![no_std]
