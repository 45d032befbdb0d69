package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/hashicorp/go-multierror"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// DefaultFile is read when no --config is given and the file exists.
const DefaultFile = "orbit.yaml"

// EnvPrefix starts every environment variable the loader reads.
const EnvPrefix = "ORBIT_"

// envAliases are extra environment names accepted for a key, after the
// canonical one. ORBIT_MYSQL_DSN is the name the result-inbox guide uses.
var envAliases = map[string][]string{
	"database.dsn": {"ORBIT_MYSQL_DSN"},
}

// Source says where configuration comes from besides the defaults.
type Source struct {
	// File is the YAML file. Empty means DefaultFile when it exists.
	File string
	// Flags holds command-line flags; FlagKeys maps a config key to the
	// name of the flag that sets it. Only flags the user set take effect.
	Flags    *pflag.FlagSet
	FlagKeys map[string]string
	// LookupEnv reads the environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Positions, when not nil, is filled by Load with "file:line" of
	// every key whose value comes from the file, for Config.ValidateAt.
	Positions map[string]string
}

// Load fills core and every module section from src. Sections must already
// hold their defaults. It returns every error at once: unknown keys with their
// file positions, wrong types and unreadable values, each naming its key.
func Load(src Source, core *Config, modules map[string]any) (string, error) {
	sections := map[string]any{"server": &core.Server, "database": &core.Database, "log": &core.Log, "metrics": &core.Metrics, "tracing": &core.Tracing}
	for id, section := range modules {
		if _, dup := sections[id]; dup {
			return "", fmt.Errorf("config: module section %q clashes with a core section", id)
		}
		sections[id] = section
	}
	known := map[string]bool{}
	for name, section := range sections {
		for _, key := range leafKeys(reflect.TypeOf(section).Elem(), name) {
			known[key] = true
		}
	}

	file := src.File
	if file == "" {
		if _, err := os.Stat(DefaultFile); err == nil {
			file = DefaultFile
		}
	}
	var errs *multierror.Error
	lines := map[string]int{} // the line of each key the file sets
	v := viper.New()
	v.SetConfigType("yaml")
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return file, fmt.Errorf("%s: %w", file, err)
		}
		// A file that is not YAML is reported once, with its line.
		var doc yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return file, yamlError(file, err)
		}
		// Unknown keys are reported here, by exact name and with their line;
		// loading goes on so that value errors are reported in the same run.
		for _, e := range checkKeys(file, &doc, sections, lines) {
			errs = multierror.Append(errs, e)
		}
		if err := v.ReadConfig(bytes.NewReader(raw)); err != nil {
			return file, yamlError(file, err)
		}
	}

	lookup := src.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	for name, section := range sections {
		setDefaults(v, name, reflect.ValueOf(section).Elem())
	}
	for key := range known {
		for _, env := range append([]string{EnvName(key)}, envAliases[key]...) {
			if val, ok := lookup(env); ok {
				v.Set(key, val)
				delete(lines, key)
				break
			}
		}
	}
	if src.Flags != nil {
		for key, flag := range src.FlagKeys {
			if f := src.Flags.Lookup(flag); f != nil && f.Changed {
				v.Set(key, f.Value.String())
				delete(lines, key)
			}
		}
	}

	if src.Positions != nil {
		for key, line := range lines {
			src.Positions[key] = fmt.Sprintf("%s:%d", file, line)
		}
	}

	names := make([]string, 0, len(sections))
	for name := range sections {
		names = append(names, name)
	}
	sort.Strings(names)
	// v.UnmarshalKey(section) would read only the highest layer holding any
	// key of the section, so one flag or variable would hide every other key
	// the file sets in it. AllSettings resolves each key on its own.
	merged := viper.New()
	if err := merged.MergeConfigMap(v.AllSettings()); err != nil {
		return file, fmt.Errorf("config: %w", err)
	}
	for _, name := range names {
		err := merged.UnmarshalKey(name, sections[name], func(dc *mapstructure.DecoderConfig) {
			dc.TagName = "yaml"
			dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(durationHook, mapstructure.StringToSliceHookFunc(","))
		})
		if err != nil {
			for _, e := range unmarshalErrors(name, err) {
				// A value the file set is reported with its line.
				key, _, _ := strings.Cut(e.Error(), ": ")
				if line, ok := lines[key]; ok {
					e = fmt.Errorf("%s:%d: %w", file, line, e)
				}
				errs = multierror.Append(errs, e)
			}
		}
	}
	return file, errs.ErrorOrNil()
}

// durationHook decodes strings into time.Duration. Unlike mapstructure's
// own hook, whose message cuts a value at its last space, its error quotes
// the whole value.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	d, err := time.ParseDuration(data.(string))
	if err != nil {
		return nil, fmt.Errorf("must be a duration such as 8s, 1m30s or 250ms, got %q", data)
	}
	return d, nil
}

// yamlError turns the YAML parser's "yaml: line N: message" into
// "file:N: message".
func yamlError(file string, err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "yaml: "); i >= 0 {
		msg = msg[i+len("yaml: "):]
	}
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		_, rest, _ := strings.Cut(msg, ": ")
		return fmt.Errorf("%s:%d: %s", file, line, rest)
	}
	return fmt.Errorf("%s: %s", file, msg)
}

// EnvName is the environment variable for a config key.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// Keys returns every known key of the given sections, sorted.
func Keys(core *Config, modules map[string]any) []string {
	sections := map[string]any{"server": &core.Server, "database": &core.Database, "log": &core.Log, "metrics": &core.Metrics, "tracing": &core.Tracing}
	for id, s := range modules {
		sections[id] = s
	}
	var keys []string
	for name, section := range sections {
		keys = append(keys, leafKeys(reflect.TypeOf(section).Elem(), name)...)
	}
	sort.Strings(keys)
	return keys
}

// setDefaults registers every leaf of a section with its current value, so
// that viper knows the key (and its environment override) even when the file
// does not mention it.
func setDefaults(v *viper.Viper, prefix string, val reflect.Value) {
	t := val.Type()
	for i := 0; i < t.NumField(); i++ {
		name := yamlName(t.Field(i))
		if name == "" {
			continue
		}
		fv := val.Field(i)
		if isSection(fv.Type()) {
			setDefaults(v, prefix+"."+name, fv)
			continue
		}
		v.SetDefault(prefix+"."+name, fv.Interface())
	}
}

func leafKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		name := yamlName(t.Field(i))
		if name == "" {
			continue
		}
		if ft := t.Field(i).Type; isSection(ft) {
			keys = append(keys, leafKeys(ft, prefix+"."+name)...)
			continue
		}
		keys = append(keys, prefix+"."+name)
	}
	return keys
}

func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t.PkgPath() != "time"
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// checkKeys walks the YAML document and reports every key that no section
// declares, with its line, matching names exactly (viper alone would accept
// `Listen` for `listen`). It records the line of every known key in lines.
func checkKeys(file string, doc *yaml.Node, sections map[string]any, lines map[string]int) []error {
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: the file must be a mapping of sections", file, root.Line)}
	}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		section, ok := sections[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", file, k.Line, k.Value))
			continue
		}
		errs = append(errs, checkMapping(file, k.Value, val, reflect.TypeOf(section).Elem(), lines)...)
	}
	return errs
}

func checkMapping(file, path string, node *yaml.Node, t reflect.Type, lines map[string]int) []error {
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: %s must be a mapping", file, node.Line, path)}
	}
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if name := yamlName(t.Field(i)); name != "" {
			fields[name] = t.Field(i).Type
		}
	}
	var errs []error
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, val := node.Content[i], node.Content[i+1]
		key := path + "." + k.Value
		ft, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", file, k.Line, key))
			continue
		}
		if isSection(ft) {
			errs = append(errs, checkMapping(file, key, val, ft, lines)...)
			continue
		}
		lines[key] = k.Line
	}
	return errs
}

// unmarshalErrors splits mapstructure's joined error into one error per
// problem, each prefixed with its key.
func unmarshalErrors(section string, err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, unmarshalErrors(section, e)...)
		}
		return out
	}
	// mapstructure wraps the joined errors in an error that only adds a
	// heading.
	if inner := errors.Unwrap(err); inner != nil {
		if _, ok := inner.(interface{ Unwrap() []error }); ok {
			return unmarshalErrors(section, inner)
		}
	}
	if de, ok := err.(*mapstructure.DecodeError); ok {
		inner := de.Unwrap()
		var pe *mapstructure.ParseError
		if errors.As(inner, &pe) {
			// "cannot parse value as 'int': strconv.ParseInt: invalid
			// syntax" does not say which value.
			inner = fmt.Errorf("must be %s, got %q", pe.Expected.Type(), fmt.Sprint(pe.Value))
		}
		return []error{fmt.Errorf("%s.%s: %w", section, de.Name(), inner)}
	}
	return []error{fmt.Errorf("%s: %w", section, err)}
}
