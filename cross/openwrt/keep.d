/etc/openflare/
