package linux

import (
	"bytes"
	"fmt"
	"path/filepath"
)

// CPUInfo is what the profile needs from /proc/cpuinfo.
type CPUInfo struct {
	// Model names the CPU. Architectures spell it differently; see
	// parseCPUInfo for the order the candidates are tried in.
	Model string
	// Hardware names the SoC or board where the kernel prints one: ARM's
	// "Hardware" (e.g. BCM2835) or MIPS's "system type" (e.g. Atheros
	// AR9330 rev 1). Empty on x86.
	Hardware string
	// Processors counts the "processor" entries, i.e. the logical CPUs
	// online when the file was read.
	Processors int
}

// armParts names ARM Ltd (implementer 0x41) cores found on common boards,
// by "CPU part". Other parts fall back to their raw codes.
var armParts = map[uint64]string{
	0xc07: "Cortex-A7",
	0xc09: "Cortex-A9",
	0xc0f: "Cortex-A15",
	0xd03: "Cortex-A53",
	0xd05: "Cortex-A55",
	0xd07: "Cortex-A57",
	0xd08: "Cortex-A72",
	0xd09: "Cortex-A73",
	0xd0b: "Cortex-A76",
}

// parseCPUInfo takes the first value of each key of interest and counts the
// "processor" lines. Model is, in order of preference:
//   - "model name" (x86, and ARM kernels since 3.8);
//   - "Processor" (capital P: the model on ARM kernels before 3.8, where
//     lower-case "processor" is the index);
//   - "cpu model" (MIPS, e.g. "MIPS 24Kc V7.4");
//   - Hardware (ARM "Hardware", else MIPS "system type");
//   - a name derived from "CPU implementer" and "CPU part" (arm64 kernels
//     print nothing else), e.g. "ARM Cortex-A72", or "ARM 0x41 part 0xd0c"
//     when the part is not in the table.
func parseCPUInfo(b []byte) CPUInfo {
	var info CPUInfo
	var modelName, oldARM, mipsModel, hardware, systemType, implementer, part []byte
	first := func(dst *[]byte, v []byte) {
		if len(*dst) == 0 {
			*dst = v
		}
	}
	for len(b) > 0 {
		var line []byte
		line, b = nextLine(b)
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			continue
		}
		v := trimSpace(line[colon+1:])
		switch string(trimSpace(line[:colon])) {
		case "processor":
			info.Processors++
		case "model name":
			first(&modelName, v)
		case "Processor":
			first(&oldARM, v)
		case "cpu model":
			first(&mipsModel, v)
		case "Hardware":
			first(&hardware, v)
		case "system type":
			first(&systemType, v)
		case "CPU implementer":
			first(&implementer, v)
		case "CPU part":
			first(&part, v)
		}
	}
	info.Hardware = clip(firstNonEmpty(hardware, systemType))
	if m := firstNonEmpty(modelName, oldARM, mipsModel); len(m) > 0 {
		info.Model = clip(m)
	} else if info.Hardware != "" {
		info.Model = info.Hardware
	} else {
		info.Model = armModel(implementer, part)
	}
	return info
}

func firstNonEmpty(vs ...[]byte) []byte {
	for _, v := range vs {
		if len(v) > 0 {
			return v
		}
	}
	return nil
}

// armModel names a core from its implementer and part codes, or returns ""
// when either is missing or not hexadecimal.
func armModel(implementer, part []byte) string {
	impl, ok1 := parseHex(implementer)
	p, ok2 := parseHex(part)
	if !ok1 || !ok2 {
		return ""
	}
	if name, ok := armParts[p]; ok && impl == 0x41 {
		return "ARM " + name
	}
	return fmt.Sprintf("ARM %#x part %#x", impl, p)
}

// CPUInfo reads <proc>/cpuinfo. It is meant for the profile, not every beat,
// so it allocates its own buffer.
func (fs FS) CPUInfo() (CPUInfo, error) {
	b, _, err := readFile(filepath.Join(fs.Proc, "cpuinfo"), nil)
	if err != nil {
		return CPUInfo{}, err
	}
	return parseCPUInfo(b), nil
}
