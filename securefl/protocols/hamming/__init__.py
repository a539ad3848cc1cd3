"""SecureHamming over a transport: each backend's client hops (:mod:`.client`) and server relay
(:mod:`.relay`), written once; CrossClientLP's round and the all-pairs matrix both run them."""
