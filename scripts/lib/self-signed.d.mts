/** An EC P-256 key and a one-day certificate for `/CN=<commonName>`, as PEM buffers. */
export function selfSignedKeyPair(commonName: string): { key: Buffer; cert: Buffer };
