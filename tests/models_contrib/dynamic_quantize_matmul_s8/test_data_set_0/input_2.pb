BbsJ
ף<