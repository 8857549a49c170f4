// Package krew describes the krew Plugin manifest (apiVersion
// krew.googlecontainertools.github.com/v1alpha2) that fence.yaml, the
// template make release fills, must produce: the fields krew-index validates.
// The plugin's tests and the release test read manifests with it.
package krew

// Plugin is the part of krew's Plugin manifest that krew-index validates.
type Plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats"`
		Platforms        []Platform `json:"platforms"`
	} `json:"spec"`
}

// Platform is one archive of the plugin and the platforms it serves.
type Platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	SHA256 string `json:"sha256"`
	Files  []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
	Bin string `json:"bin"`
}
