package redis

// numSlots is the number of hash slots of Redis Cluster.
const numSlots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key's hash tag (the part between the first '{' and the first '}' after
// it, when not empty) or of the whole key, modulo 16384.
func Slot(key string) int {
	return int(crc16(hashTag(key)) % numSlots)
}

// hashTag returns the part of key that Redis Cluster hashes.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key // "{}" is no tag: the whole key is hashed
				}
				return key[i+1 : j]
			}
		}
		return key
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
