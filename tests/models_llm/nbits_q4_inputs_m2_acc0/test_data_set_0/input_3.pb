Bzero_pointsJ0x	Š§
™¦§§	zš©fˆjˆ	†w–giviˆ¦	i	