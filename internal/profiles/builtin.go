package profiles

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/bettercompute/computed/internal/authz"
)

// builtinDocs are the profiles the provision module ships, read-only under
// the tenant builtin.
var builtinDocs = []string{
	`{
  "id": "ubuntu-24.04-gpu-nvidia", "version": 1,
  "name": "Ubuntu 24.04 GPU node with the NVIDIA driver",
  "description": "Ubuntu 24.04 LTS (noble) on the first NVMe disk with the NVIDIA data-center driver.",
  "image": {"url": "https://images.bettercompute.dev/ubuntu/24.04/noble-server-amd64.raw.zst",
            "sha256": "6f1c0a2f6b2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "format": "raw"},
  "drivers": [{"name": "nvidia", "version": "570.86.15"}],
  "steps": [
    {"name": "wipe", "use": "disk.wipe", "with": {"devices": ["/dev/nvme0n1"]}},
    {"name": "os", "use": "os.install", "with": {"device": "/dev/nvme0n1"}},
    {"name": "drivers", "use": "drivers.install"},
    {"name": "network", "use": "network.configure", "with": {"dhcp": true}},
    {"name": "host", "use": "host.configure"},
    {"name": "cloud-init", "use": "cloud-init.write"},
    {"name": "power", "use": "bmc.power", "with": {"action": "cycle"}}
  ],
  "userData": "#cloud-config\npackage_update: true\n",
  "hostConfig": {"hostname": "{{ node.name }}", "kernelArgs": ["iommu=pt"], "sysctl": {}}
}`,
	`{
  "id": "rocky-9-base", "version": 1,
  "name": "Rocky Linux 9 base",
  "description": "Rocky Linux 9 on the first SATA/SAS disk, no accelerators.",
  "image": {"url": "https://images.bettercompute.dev/rocky/9/rocky-9-generic-x86_64.qcow2",
            "sha256": "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9", "format": "qcow2"},
  "steps": [
    {"name": "wipe", "use": "disk.wipe", "with": {"devices": ["/dev/sda"]}},
    {"name": "os", "use": "os.install", "with": {"device": "/dev/sda", "layout": "lvm"}},
    {"name": "network", "use": "network.configure", "with": {"dhcp": true}},
    {"name": "host", "use": "host.configure"},
    {"name": "power", "use": "bmc.power", "with": {"action": "cycle"}}
  ],
  "hostConfig": {"hostname": "{{ node.name }}", "timezone": "UTC"}
}`,
	`{
  "id": "ubuntu-24.04-mig-inference", "version": 1,
  "name": "MIG-partitioned inference node",
  "description": "Ubuntu 24.04 with the NVIDIA driver and every GPU split into seven 1g.10gb MIG instances.",
  "image": {"url": "https://images.bettercompute.dev/ubuntu/24.04/noble-server-amd64.raw.zst",
            "sha256": "6f1c0a2f6b2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "format": "raw"},
  "drivers": [{"name": "nvidia", "version": "570.86.15"}, {"name": "nvidia-fabricmanager", "version": "570.86.15"}],
  "steps": [
    {"name": "wipe", "use": "disk.wipe", "with": {"devices": ["/dev/nvme0n1"]}},
    {"name": "os", "use": "os.install", "with": {"device": "/dev/nvme0n1"}},
    {"name": "drivers", "use": "drivers.install"},
    {"name": "mig", "use": "mig.configure", "with": {"profile": "1g.10gb", "count": 7}},
    {"name": "network", "use": "network.configure", "with": {"dhcp": true}},
    {"name": "host", "use": "host.configure"},
    {"name": "cloud-init", "use": "cloud-init.write"},
    {"name": "power", "use": "bmc.power", "with": {"action": "cycle"}}
  ],
  "userData": "#cloud-config\nruncmd:\n  - [nvidia-smi, -L]\n",
  "hostConfig": {"hostname": "{{ node.name }}", "kernelArgs": ["iommu=pt"]}
}`,
}

// shipped is when the builtin profiles were published (their timestamps).
var shipped = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// builtins are the parsed builtin profiles, sorted by (profileId, profileVersion).
var builtins = func() []Profile {
	var out []Profile
	for _, s := range builtinDocs {
		c, err := checkDocument([]byte(s))
		if err != nil {
			panic("profiles: builtin profile does not check: " + err.Error())
		}
		// Compact the document the way it is served.
		var v any
		_ = json.Unmarshal(c.Raw, &v)
		raw, _ := json.Marshal(v)
		out = append(out, Profile{TenantID: authz.BuiltinTenant, ProfileID: c.ID, ProfileVersion: c.Version,
			Visibility: "public", Document: raw, RowVersion: 1, CreatedAt: shipped, UpdatedAt: shipped})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ProfileID != out[j].ProfileID {
			return out[i].ProfileID < out[j].ProfileID
		}
		return out[i].ProfileVersion < out[j].ProfileVersion
	})
	return out
}()

// Builtins returns the profiles modules ship.
func Builtins() []Profile { return append([]Profile{}, builtins...) }

// builtin finds a builtin profile; version 0 means the latest.
func builtin(id string, version int) (*Profile, bool) {
	var found *Profile
	for i := range builtins {
		b := &builtins[i]
		if b.ProfileID == id && (version == 0 || b.ProfileVersion == version) {
			found = b
		}
	}
	if found == nil {
		return nil, false
	}
	p := *found
	return &p, true
}

// shippedID reports whether a module ships a profile of id (any version).
func shippedID(id string) bool {
	_, ok := builtin(id, 0)
	return ok
}
