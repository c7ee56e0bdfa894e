package observability

import "time"

// parseRFC3339 reads nginx's $time_iso8601 ("2026-07-18T10:00:00+08:00")
// without the allocations of time.Parse (which builds a zone for every
// offset that is not Local's). Any other shape goes to time.Parse, whose
// answer it must equal.
func parseRFC3339(b []byte) (int64, bool) {
	if len(b) == 25 && b[19] != 'Z' || len(b) == 20 && b[19] == 'Z' {
		if b[4] == '-' && b[7] == '-' && b[10] == 'T' && b[13] == ':' && b[16] == ':' {
			off, ok := int64(0), true
			if len(b) == 25 {
				off, ok = zoneOffset(b[19], b[20:22], b[23:25], b[22] == ':')
			}
			if ok {
				if t, ok := civil(b[0:4], b[5:7], b[8:10], b[11:13], b[14:16], b[17:19]); ok {
					return t - off, true
				}
			}
		}
	}
	t, err := time.Parse(time.RFC3339, string(b))
	if err != nil {
		return 0, false
	}
	return t.Unix(), true
}

// months is one string rather than an array of twelve: constant text
// costs nothing in the binary's data segment.
const months = "JanFebMarAprMayJunJulAugSepOctNovDec"

// parseCLFTime reads nginx's $time_local ("18/Jul/2026:10:00:00 +0800") the
// same way: a fixed shape here, anything else through time.Parse.
func parseCLFTime(b []byte) (int64, bool) {
	if len(b) == 26 && b[2] == '/' && b[6] == '/' && b[11] == ':' && b[14] == ':' && b[17] == ':' && b[20] == ' ' {
		month := 0
		for i := 0; i < len(months); i += 3 {
			if string(b[3:6]) == months[i:i+3] {
				month = i/3 + 1
				break
			}
		}
		if month > 0 {
			if off, ok := zoneOffset(b[21], b[22:24], b[24:26], true); ok {
				mm := [2]byte{byte('0' + month/10), byte('0' + month%10)}
				if t, ok := civil(b[7:11], mm[:], b[0:2], b[12:14], b[15:17], b[18:20]); ok {
					return t - off, true
				}
			}
		}
	}
	t, err := time.Parse(combinedTimeLayout, string(b))
	if err != nil {
		return 0, false
	}
	return t.Unix(), true
}

// zoneOffset reads ±hh:mm (sep true means the separator was present) in
// seconds east of UTC, within the ranges time.Parse accepts.
func zoneOffset(sign byte, hh, mm []byte, sep bool) (int64, bool) {
	h, ok1 := digits(hh)
	m, ok2 := digits(mm)
	if !ok1 || !ok2 || !sep || h > 23 || m > 59 {
		return 0, false
	}
	off := int64(h*3600 + m*60)
	switch sign {
	case '+':
		return off, true
	case '-':
		return -off, true
	}
	return 0, false
}

// civil returns the Unix time of a valid calendar date and wall time read
// as UTC; out-of-range fields (30 February, hour 24, second 60) are not
// accepted here, exactly as time.Parse refuses them.
func civil(yyyy, mo, dd, hh, mi, ss []byte) (int64, bool) {
	y1, ok1 := digits(yyyy[:2])
	y2, ok2 := digits(yyyy[2:])
	month, ok3 := digits(mo)
	day, ok4 := digits(dd)
	hour, ok5 := digits(hh)
	minute, ok6 := digits(mi)
	sec, ok7 := digits(ss)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return 0, false
	}
	year := y1*100 + y2
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC).Unix(), true
}

// digits reads exactly two ASCII digits.
func digits(b []byte) (int, bool) {
	if len(b) != 2 || !isDigit(b[0]) || !isDigit(b[1]) {
		return 0, false
	}
	return int(b[0]-'0')*10 + int(b[1]-'0'), true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// combinedTimeLayout is $time_local in the combined format.
const combinedTimeLayout = "02/Jan/2006:15:04:05 -0700"
