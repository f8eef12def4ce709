# The id maps and namespace inodes depend on the host and on how the function
# was started, so compare only their shape; every other key is exact for a
# sandboxed run (new pid and network namespaces, read-only root, private /tmp).
.context.uid_map |= type
| .context.gid_map |= type
| .context.ns |= map_values(test("^[a-z]+:\\[[0-9]+\\]$"))
