"""Trusted parent: starting and watching sandboxed children (bubblewrap or a scrubbed process group, the zygote and
its forked children, pools, process trees, cores)."""
