package inventory

import "github.com/bettercompute/computed/internal/registry"

// The report's bounds in its schema, from the constants the parser checks
// with (sections.go): the OpenAPI document stated none, so a report valid
// by it (a driver version of 4,000 characters, 900 drivers, a 210-character
// WWN, an unknown field of memory) was refused.
func init() {
	registry.Refine[Sections](func(s map[string]any) {
		strict(s)
		p := registry.Props(s)
		p["gpus"]["maxItems"] = MaxGPUs
		p["disks"]["maxItems"] = MaxDisks
		p["nics"]["maxItems"] = MaxNICs
		for _, m := range []string{"drivers", "firmware"} {
			p[m]["maxProperties"] = MaxMapEntries
			p[m]["propertyNames"] = map[string]any{"pattern": keyPattern}
			p[m]["additionalProperties"] = map[string]any{"type": "string", "maxLength": MaxString, "pattern": noNUL}
		}
	})
	registry.Refine[System](func(s map[string]any) { strict(s) })
	registry.Refine[CPU](func(s map[string]any) {
		strict(s)
		for _, k := range []string{"sockets", "cores", "threads"} {
			registry.Props(s)[k]["maximum"] = maxCount
		}
	})
	registry.Refine[Memory](func(s map[string]any) {
		strict(s)
		registry.Props(s)["totalBytes"]["maximum"] = int64(maxBytes)
	})
	registry.Refine[GPU](func(s map[string]any) {
		strict(s)
		p := registry.Props(s)
		p["uuid"]["pattern"], p["uuid"]["maxLength"] = uuidPattern, maxIDLen
		p["index"]["maximum"] = maxIndex
		p["memoryMiB"]["maximum"] = maxMemoryMiB
		p["migMode"]["enum"] = []string{"enabled", "disabled"}
		p["migDevices"]["maxItems"] = MaxMIGDevices
	})
	registry.Refine[MIGDevice](func(s map[string]any) {
		strict(s)
		p := registry.Props(s)
		p["uuid"]["pattern"], p["uuid"]["maxLength"] = uuidPattern, maxIDLen
		p["profile"]["minLength"] = 1
	})
	registry.Refine[Disk](func(s map[string]any) {
		strict(s)
		p := registry.Props(s)
		p["wwn"]["pattern"], p["wwn"]["maxLength"] = wwnPattern, maxIDLen
		p["sizeBytes"]["maximum"] = int64(maxBytes)
	})
	registry.Refine[NIC](func(s map[string]any) {
		strict(s)
		p := registry.Props(s)
		p["mac"]["pattern"] = macPattern
		p["speedMbps"]["maximum"] = maxSpeedMbps
	})
	registry.Refine[OS](func(s map[string]any) { strict(s) })
}

// noNUL is a string without U+0000, which the parser refuses in every
// string (PostgreSQL's text holds none).
const noNUL = `^[^\x00]*$`

// strict closes an object of the report to other fields, bounds each of
// its strings to MaxString characters without NUL and its integers below
// by zero, as the parser does.
func strict(s map[string]any) {
	s["additionalProperties"] = false
	for _, p := range registry.Props(s) {
		switch p["type"] {
		case "string":
			p["maxLength"], p["pattern"] = MaxString, noNUL
		case "integer":
			p["minimum"] = 0
		}
	}
}
