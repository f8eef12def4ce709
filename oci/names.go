package oci

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Registries whose images people name without the registry part: Docker
// Hub ("foo" means docker.io/library/foo) and the "localhost" that podman
// and buildah put in front of local images ("foo" is stored as
// localhost/foo:latest).
var shortNameRegistries = map[string]bool{
	name.DefaultRegistry: true,
	"docker.io":          true,
	"localhost":          true,
}

// refKeys gives two comparable forms of an image name: the full one
// (registry/repository:tag or @digest) and, for names that users write
// without a registry, a short one without registry and "library/".
func refKeys(s string) (full, short string) {
	// Some go-containerregistry versions read "localhost/foo" as the Docker
	// Hub repository "localhost/foo"; podman means the local registry.
	rest, local := strings.CutPrefix(s, "localhost/")
	ref, err := name.ParseReference(rest)
	if err != nil {
		return "", ""
	}
	repo := ref.Context()
	registry := repo.RegistryStr()
	if local {
		registry = "localhost"
	}
	sep := ":"
	if _, ok := ref.(name.Digest); ok {
		sep = "@"
	}
	full = registry + "/" + repo.RepositoryStr() + sep + ref.Identifier()
	if shortNameRegistries[registry] {
		short = strings.TrimPrefix(repo.RepositoryStr(), "library/") + sep + ref.Identifier()
	}
	return full, short
}

// nameMatches reports whether a name the user gave and a name stored in
// an archive mean the same image: "foo", "foo:latest",
// "docker.io/library/foo:latest" and "localhost/foo:latest" all match each
// other; "quay.io/foo" matches none of them.
func nameMatches(want, have string) bool {
	if want == have {
		return true
	}
	wf, ws := refKeys(want)
	hf, hs := refKeys(have)
	if wf == "" || hf == "" {
		return false
	}
	return wf == hf || (ws != "" && ws == hs)
}

// candidate is one image an archive offers: a docker-save manifest.json
// entry or an entry of an OCI layout's index.json.
type candidate struct {
	names []string // docker RepoTags or OCI ref names, as stored
	label string   // how to show an unnamed candidate
	// digest also selects the candidate, named or not: its manifest's
	// (an OCI index entry) or its config's, the image ID (docker save).
	digest string
}

// matchedName returns the first stored name that matches want.
func (c candidate) matchedName(want string) (string, bool) {
	for _, n := range c.names {
		if nameMatches(want, n) {
			return n, true
		}
	}
	return "", false
}

// defaultName is the name shown for a candidate chosen without a name.
func (c candidate) defaultName() string {
	if len(c.names) > 0 {
		return c.names[0]
	}
	return ""
}

// listNames renders the names of all candidates for an error message.
func listNames(cs []candidate) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		if len(c.names) == 0 {
			parts = append(parts, c.label)
			continue
		}
		for _, n := range c.names {
			parts = append(parts, fmt.Sprintf("%q", n))
		}
	}
	return strings.Join(parts, ", ")
}
