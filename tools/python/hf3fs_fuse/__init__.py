"""3FS's hf3fs_fuse package names, served by kvcfs (see hf3fs_fuse.io)."""
