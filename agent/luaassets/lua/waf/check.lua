-- access_by_lua_file entry point for servers without PoW or SW.
require("waf.runtime").check()
