// Package oci reads container image tarballs (docker save output and OCI
// image layout archives, plain or compressed), verifies them against their
// digests and unpacks their layers safely into one root filesystem.
package oci
