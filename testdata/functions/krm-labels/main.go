// krm-labels is a KRM transformer written with kyaml's fn/framework, as
// the kpt and kustomize catalogs write them: it reads a ResourceList on
// stdin and prints it back on stdout with the functionConfig's labels set
// on every item. It knows nothing of Crossplane or ocifn.
//
// functionConfig:
//
//	labels:    {key: value, ...}  set on every item (required)
//	drop:      [Kind, ...]        items of these kinds are removed
//	configMap: name               adds a ConfigMap of that name whose
//	                              data.labelled lists the items labelled
package main

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/fn/framework/command"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// config is the functionConfig.
type config struct {
	Labels    map[string]string `yaml:"labels"`
	Drop      []string          `yaml:"drop"`
	ConfigMap string            `yaml:"configMap"`
}

func process(rl *framework.ResourceList) error {
	var cfg config
	if err := framework.LoadFunctionConfig(rl.FunctionConfig, &cfg); err != nil {
		return fmt.Errorf("reading functionConfig: %w", err)
	}
	if len(cfg.Labels) == 0 {
		return fmt.Errorf("functionConfig.labels is empty: nothing to set")
	}
	keys := make([]string, 0, len(cfg.Labels))
	for k := range cfg.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	var kept []*yaml.RNode
	var labelled []string
	for _, item := range rl.Items {
		if slices.Contains(cfg.Drop, item.GetKind()) {
			continue
		}
		for _, k := range keys {
			if err := item.PipeE(yaml.SetLabel(k, cfg.Labels[k])); err != nil {
				return fmt.Errorf("labelling %s %s: %w", item.GetKind(), item.GetName(), err)
			}
		}
		labelled = append(labelled, item.GetKind()+"/"+item.GetName())
		kept = append(kept, item)
	}
	if cfg.ConfigMap != "" {
		cm := yaml.MustParse("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + cfg.ConfigMap + "\n")
		cm.SetDataMap(map[string]string{"labelled": strings.Join(labelled, ",")})
		kept = append(kept, cm)
	}
	rl.Items = kept
	rl.Results = append(rl.Results, &framework.Result{
		Severity: framework.Info,
		Message:  fmt.Sprintf("labelled %d resources", len(labelled)),
	})
	return nil
}

func main() {
	cmd := command.Build(framework.ResourceListProcessorFunc(process), command.StandaloneDisabled, false)
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
