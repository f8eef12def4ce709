package oci

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PackageInfo describes a Function package: its metadata, the runtime that
// serves it and the function image it embeds.
type PackageInfo struct {
	// Digest is the package image's manifest digest.
	Digest string `json:"digest"`
	// Meta is the package.yaml of the package.
	Meta *PackageMeta `json:"metadata"`
	// MetaLayer is the index (from 0) of the layer with package.yaml, and
	// MetaAnnotated whether the manifest or the config's layer labels mark it
	// io.crossplane.xpkg: base.
	MetaLayer     int  `json:"metadataLayer"`
	MetaAnnotated bool `json:"metadataLayerAnnotated"`
	// Runtime describes what runs the function.
	Runtime RuntimeInfo `json:"runtime"`
	// Function describes the embedded function image; nil for a package
	// that ocifn did not build.
	Function *FunctionImageInfo `json:"function,omitempty"`
}

// RuntimeInfo is the runtime of a package, from its image config.
type RuntimeInfo struct {
	Entrypoint   []string `json:"entrypoint,omitempty"`
	Cmd          []string `json:"cmd,omitempty"`
	OcifnVersion string   `json:"ocifnVersion,omitempty"`
	OcifnCommit  string   `json:"ocifnCommit,omitempty"`
	CrunVersion  string   `json:"crunVersion,omitempty"`
	BuiltBy      string   `json:"builtBy,omitempty"`
	Platform     string   `json:"platform,omitempty"`
	// IO and API are the I/O mode and the front ocifn serve uses in the
	// package: IO as ocifn build --io recorded it, else as the function
	// image's own label records it; API as ocifn build --api recorded it.
	// Empty: json and crossplane.
	IO  string `json:"io,omitempty"`
	API string `json:"api,omitempty"`
}

// FunctionImageInfo is the embedded function image's identity and process.
type FunctionImageInfo struct {
	Path       string   `json:"path"`
	Name       string   `json:"name,omitempty"`
	Digest     string   `json:"digest"`
	Platform   string   `json:"platform,omitempty"`
	Layers     int      `json:"layers"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// InspectPackage reads the description of a package image. The function
// image is read from the package (its layer is fetched and checked), using
// scratchDir as FunctionFromPackage does.
func InspectPackage(img v1.Image, scratchDir string) (*PackageInfo, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("cannot compute the package digest: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the package config: %w", err)
	}
	data, layer, annotated, err := PackageYAML(img)
	if err != nil {
		return nil, err
	}
	meta, err := ParsePackageMeta(data)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: %w", PackageFile, err)
	}
	l := cf.Config.Labels
	info := &PackageInfo{
		Digest:        digest.String(),
		Meta:          meta,
		MetaLayer:     layer,
		MetaAnnotated: annotated,
		Runtime: RuntimeInfo{
			Entrypoint:   cf.Config.Entrypoint,
			Cmd:          cf.Config.Cmd,
			OcifnVersion: l[LabelVersion],
			OcifnCommit:  l[LabelCommit],
			CrunVersion:  l[LabelCrunVersion],
			BuiltBy:      l[LabelBuildVersion],
			Platform:     platform(cf),
			IO:           l[LabelIO],
			API:          l[LabelAPI],
		},
	}
	if !IsPackage(cf) {
		return info, nil
	}
	fn, err := FunctionFromPackage(img, scratchDir, DefaultMaxScratchBytes)
	if err != nil {
		return nil, err
	}
	defer fn.Close()
	// What ocifn serve will use when the package records no mode: the
	// function image's own label (Image.IOMode).
	info.Runtime.IO = fn.IOMode()
	fcf := fn.ConfigFile()
	layers, err := fn.Image().Layers()
	if err != nil {
		return nil, err
	}
	info.Function = &FunctionImageInfo{
		Path:       l[LabelFunction],
		Name:       fn.Name(),
		Digest:     fn.Digest().String(),
		Platform:   platform(fcf),
		Layers:     len(layers),
		Entrypoint: fcf.Config.Entrypoint,
		Cmd:        fcf.Config.Cmd,
		Env:        fcf.Config.Env,
		WorkingDir: fcf.Config.WorkingDir,
		User:       fcf.Config.User,
	}
	return info, nil
}

func platform(cf *v1.ConfigFile) string {
	if cf.OS == "" {
		return ""
	}
	p := cf.OS + "/" + cf.Architecture
	if cf.Variant != "" {
		p += "/" + cf.Variant
	}
	return p
}
