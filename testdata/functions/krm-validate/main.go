// krm-validate is a KRM validator written with kyaml's fn/framework: the
// "validate-composed-resources" step. It changes nothing; for each composed
// resource (every item but the one ocifn marks as the composite resource)
// that breaks a rule it reports an error result pointing at the resource
// and the field, and then exits 1, as kyaml's validators do.
//
// functionConfig:
//
//	requiredLabels: [key, ...]                  each composed resource has them
//	deny: [{fieldPath: a.b, value: v}, ...]     no composed resource has a.b == v
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/fn/framework/command"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// compositeAnnotation marks the item that is the XR, which this step does
// not validate.
const compositeAnnotation = "ocifn.io/composite"

type config struct {
	RequiredLabels []string `yaml:"requiredLabels"`
	Deny           []struct {
		FieldPath string `yaml:"fieldPath"`
		Value     string `yaml:"value"`
	} `yaml:"deny"`
}

func process(rl *framework.ResourceList) error {
	var cfg config
	if err := framework.LoadFunctionConfig(rl.FunctionConfig, &cfg); err != nil {
		return fmt.Errorf("reading functionConfig: %w", err)
	}
	var results framework.Results
	checked := 0
	for _, item := range rl.Items {
		if item.GetAnnotations()[compositeAnnotation] == "true" {
			continue
		}
		checked++
		ref := &yaml.ResourceIdentifier{
			TypeMeta: yaml.TypeMeta{APIVersion: item.GetApiVersion(), Kind: item.GetKind()},
			NameMeta: yaml.NameMeta{Name: item.GetName(), Namespace: item.GetNamespace()},
		}
		labels := item.GetLabels()
		for _, l := range cfg.RequiredLabels {
			if _, ok := labels[l]; !ok {
				results = append(results, &framework.Result{
					Severity:    framework.Error,
					Message:     fmt.Sprintf("label %s is required", l),
					ResourceRef: ref,
					Field:       &framework.Field{Path: "metadata.labels." + l},
				})
			}
		}
		for _, d := range cfg.Deny {
			v, err := item.GetString(d.FieldPath)
			if err == nil && v == d.Value {
				results = append(results, &framework.Result{
					Severity:    framework.Error,
					Message:     fmt.Sprintf("%s must not be %q", d.FieldPath, d.Value),
					ResourceRef: ref,
					Field:       &framework.Field{Path: d.FieldPath, CurrentValue: v},
				})
			}
		}
	}
	if len(results) > 0 {
		rl.Results = append(rl.Results, results...)
		return results
	}
	rl.Results = append(rl.Results, &framework.Result{
		Severity: framework.Info,
		Message:  fmt.Sprintf("validated %d composed resources", checked),
	})
	return nil
}

func main() {
	cmd := command.Build(framework.ResourceListProcessorFunc(process), command.StandaloneDisabled, true)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "krm-validate: %d validation errors\n", countErrors(err))
		os.Exit(1)
	}
}

func countErrors(err error) int {
	if r, ok := err.(framework.Results); ok {
		return len(r)
	}
	return 1
}
