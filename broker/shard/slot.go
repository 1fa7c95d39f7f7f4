package shard

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// slot returns the Redis Cluster hash slot of a key whose hash tag is tag:
// CRC16 (XMODEM: polynomial 0x1021, initial value 0) modulo 16,384.
func slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % slots
}
